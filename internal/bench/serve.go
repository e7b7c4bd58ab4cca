package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/wcache/wcache/core/daemonfile"
)

// Timeouts of daemon processes: generous, a healthy daemon of a few GiB is
// ready in seconds even on a busy two-core machine.
const (
	readyTimeout = 10 * time.Minute
	stopTimeout  = 60 * time.Second
	// readyPoll is how often the ready file is looked for: the resolution
	// of the start-to-ready figures.
	readyPoll = 250 * time.Microsecond
)

// daemonProc is a running `wcache serve`, in its own process group so that
// its plugin goes with it.
type daemonProc struct {
	w   *world
	cmd *exec.Cmd
	// Started is just before fork/exec; ReadyAt when the ready file was
	// first seen naming this process.
	Started, ReadyAt time.Time
	Ready            daemonfile.Ready
	out              syncBuffer

	done    chan struct{}
	waitErr error
}

// syncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serveArgs are the arguments of `wcache serve` for the world's mock device.
func serveArgs(model string, extra ...string) []string {
	return append([]string{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model}, extra...)
}

// startServe starts `wcache serve` on model. With wait it returns once the
// ready file names the process (an error if the process exits first or
// readyTimeout passes); onStart, when set, runs right after fork/exec
// (e.g. to start sampling its memory).
func (w *world) startServe(ctx context.Context, model string, wait bool, onStart func(pid int), extra ...string) (*daemonProc, error) {
	bin := filepath.Join(w.o.BinDir, "wcache")
	d := &daemonProc{w: w, done: make(chan struct{})}
	d.cmd = exec.Command(bin, serveArgs(model, extra...)...)
	d.cmd.Env = w.Env()
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	d.Started = time.Now()
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.done)
	}()
	if onStart != nil {
		onStart(d.cmd.Process.Pid)
	}
	if !wait {
		return d, nil
	}
	if err := d.waitReady(ctx); err != nil {
		d.kill()
		return nil, err
	}
	return d, nil
}

// PID is the daemon's process id.
func (d *daemonProc) PID() int { return d.cmd.Process.Pid }

// Output is what the daemon wrote to stdout and stderr so far.
func (d *daemonProc) Output() string { return d.out.String() }

// waitReady polls for the ready file until it names this process.
func (d *daemonProc) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(readyTimeout)
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	for {
		if _, err := os.Stat(d.w.Paths.Ready); err == nil {
			now := time.Now()
			r, err := daemonfile.ReadReady(d.w.Paths.Ready)
			if err == nil && r.PID == d.PID() {
				d.ReadyAt, d.Ready = now, r
				return nil
			}
		}
		select {
		case <-d.done:
			return fmt.Errorf("wcache serve exited before it was ready (%v):\n%s", d.waitErr, tail(d.Output(), 4000))
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wcache serve not ready after %s:\n%s", readyTimeout, tail(d.Output(), 4000))
		}
	}
}

// outputTimeout bounds waiting for a line serve prints once ready.
const outputTimeout = 30 * time.Second

// waitOutput waits until the daemon's output matches re and returns it.
func (d *daemonProc) waitOutput(re *regexp.Regexp) (string, error) {
	deadline := time.Now().Add(outputTimeout)
	for {
		out := d.Output()
		if re.MatchString(out) {
			return out, nil
		}
		select {
		case <-d.done:
			return "", fmt.Errorf("wcache serve exited (%v) without printing %q:\n%s", d.waitErr, re, tail(out, 4000))
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("wcache serve printed no %q within %s:\n%s", re, outputTimeout, tail(out, 4000))
		}
	}
}

// Wait waits for the process to exit and returns its error.
func (d *daemonProc) Wait(timeout time.Duration) error {
	select {
	case <-d.done:
		return d.waitErr
	case <-time.After(timeout):
		return fmt.Errorf("wcache serve (pid %d) still running after %s", d.PID(), timeout)
	}
}

// Stop sends SIGTERM and waits for the daemon to drain and exit; after
// stopTimeout it kills the whole process group. The daemon's exit status
// is returned (nil for a clean exit).
func (d *daemonProc) Stop() error {
	select {
	case <-d.done:
		return d.waitErr
	default:
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop wcache serve: %w", err)
	}
	if err := d.Wait(stopTimeout); err != nil {
		select {
		case <-d.done:
			return fmt.Errorf("wcache serve exited with %w:\n%s", err, tail(d.Output(), 4000))
		default:
			d.kill()
			return err
		}
	}
	return nil
}

// kill ends the process group at once (plugin included) and waits.
func (d *daemonProc) kill() {
	_ = syscall.Kill(-d.PID(), syscall.SIGKILL)
	<-d.done
}

// withOutput adds the tail of the daemon's output to err (nil stays nil).
func (d *daemonProc) withOutput(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w\nwcache serve (pid %d) output:\n%s", err, d.PID(), tail(d.Output(), 3000))
}

// PluginPID finds the daemon's backend plugin: its child process.
func (d *daemonProc) PluginPID() (int, error) {
	kids, err := ChildPIDs(d.PID())
	if err != nil {
		return 0, err
	}
	for _, k := range kids {
		exe, err := os.Readlink("/proc/" + strconv.Itoa(k) + "/exe")
		if err == nil && filepath.Base(exe) == "wcache-backend-mock" {
			return k, nil
		}
	}
	return 0, fmt.Errorf("no wcache-backend-mock child of pid %d (children %v)", d.PID(), kids)
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
