package testproc

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/internal/defaults"
	"github.com/wcache/wcache/internal/poll"
)

// Options describe a child process.
type Options struct {
	// Path is the executable; Args its arguments (without argv[0]).
	Path string
	Args []string
	// Env is the child's whole environment ("KEY=VALUE"); nil inherits the
	// caller's. Dir is its working directory ("": the caller's).
	Env []string
	Dir string
	// Echo, when set, also receives everything the child writes, as it
	// comes (e.g. os.Stderr for a verbose run).
	Echo io.Writer
	// Edit, when set, adjusts the command just before it starts
	// (credentials, extra files). It must keep SysProcAttr.Setpgid.
	Edit func(*exec.Cmd)
	// Poll is how often the waits look again (default 20 ms); a benchmark
	// that times start to ready polls finer.
	Poll time.Duration
}

// Process is a started child. Its methods are safe for concurrent use.
type Process struct {
	// Cmd is the running command; do not Wait on it.
	Cmd *exec.Cmd
	// Args are the arguments it was started with.
	Args []string
	// Started is the time just before fork/exec.
	Started time.Time

	name                   string
	poll                   time.Duration
	stdout, stderr, output *childproc.Buffer
	done                   chan struct{}
	err                    error // valid after done
}

// Start starts the child in a process group of its own (so that Kill
// reaches its descendants too) and collects its stdout and stderr.
func Start(o Options) (*Process, error) {
	cmd := exec.Command(o.Path, o.Args...)
	cmd.Env, cmd.Dir = o.Env, o.Dir
	p := &Process{Cmd: cmd, Args: o.Args, name: filepath.Base(o.Path), poll: o.Poll, stdout: &childproc.Buffer{},
		stderr: &childproc.Buffer{}, output: &childproc.Buffer{}, done: make(chan struct{})}
	defaults.Positive(&p.poll, pollInterval)
	cmd.Stdout = teeWriter{p.stdout, p.output, o.Echo}
	cmd.Stderr = teeWriter{p.stderr, p.output, o.Echo}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if o.Edit != nil {
		o.Edit(cmd)
	}
	p.Started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s %s: %w", p.name, strings.Join(o.Args, " "), err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id (and its process group id).
func (p *Process) PID() int { return p.Cmd.Process.Pid }

// Stdout, Stderr and Output are what the process wrote so far: to stdout,
// to stderr, and to both in the order it came.
func (p *Process) Stdout() string { return p.stdout.String() }
func (p *Process) Stderr() string { return p.stderr.String() }
func (p *Process) Output() string { return p.output.String() }

// Done is closed when the process has exited and its output is complete:
// a descendant that inherited its stdout or stderr (an orphaned plugin)
// holds it open until it exits too, or until Kill ends the group.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool { return poll.Closed(p.done) }

// Err waits for the exit and returns exec's verdict: nil for status 0, an
// *exec.ExitError otherwise.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// ExitCode waits for the exit and returns its status (-1 when killed by a
// signal).
func (p *Process) ExitCode() int {
	<-p.done
	var xe *exec.ExitError
	if errors.As(p.err, &xe) {
		return xe.ExitCode()
	}
	if p.err != nil {
		return -1
	}
	return 0
}

// Wait waits up to timeout for the process to exit and returns its exit
// code; ok is false on timeout.
func (p *Process) Wait(timeout time.Duration) (code int, ok bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.ExitCode(), true
	case <-t.C:
		return 0, false
	}
}

// Signal sends sig to the process (not its group).
func (p *Process) Signal(sig syscall.Signal) error {
	return syscall.Kill(p.PID(), sig)
}

// Kill sends SIGKILL to the whole process group — the group outlives its
// leader when a plugin was orphaned — and waits for the process.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to grace for the process to exit; then
// (or at once when it has exited) it kills the rest of the group. It
// returns nil for a clean exit within grace, the exit error for an unclean
// one, and a *StopTimeoutError when the process had to be killed.
func (p *Process) Stop(grace time.Duration) error {
	if !p.Exited() {
		_ = p.Signal(syscall.SIGTERM)
	}
	_, ok := p.Wait(grace)
	p.Kill()
	if !ok {
		return &StopTimeoutError{Process: p.String(), Grace: grace}
	}
	if p.err != nil {
		return fmt.Errorf("%s (pid %d) exited with %w", p.name, p.PID(), p.err)
	}
	return nil
}

// StopTimeoutError: a process did not exit within its grace period after
// SIGTERM and was killed.
type StopTimeoutError struct {
	Process string // the process with its output (Process.String)
	Grace   time.Duration
}

func (e *StopTimeoutError) Error() string {
	return fmt.Sprintf("did not stop within %s of SIGTERM, killed:\n%s", e.Grace, e.Process)
}

// String names the process and shows its output so far.
func (p *Process) String() string {
	return fmt.Sprintf("%s %s (pid %d)\nstdout:\n%s\nstderr:\n%s",
		p.name, strings.Join(p.Args, " "), p.PID(), p.Stdout(), p.Stderr())
}

// teeWriter writes to its stream's buffer, the combined output and the
// optional echo (whose errors are ignored).
type teeWriter struct {
	own, all *childproc.Buffer
	echo     io.Writer
}

func (w teeWriter) Write(p []byte) (int, error) {
	w.own.Write(p)
	w.all.Write(p)
	if w.echo != nil {
		_, _ = w.echo.Write(p)
	}
	return len(p), nil
}
