package bench

// Every child process the harness starts: `wcache serve` daemons, fresh Go
// helper processes (this binary re-executed) and Python scripts. Kept in
// this one file so that it can move onto a shared child-process harness.

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/wcache/wcache/core/daemonfile"
)

// Timeouts of daemon processes: generous, a healthy daemon of a few GiB is
// ready in seconds even on a busy two-core machine. readyPoll is how often
// the ready file is looked for: the resolution of start-to-ready.
const (
	readyTimeout = 10 * time.Minute
	stopTimeout  = 60 * time.Second
	readyPoll    = 250 * time.Microsecond
)

// daemonProc is a running `wcache serve`, in its own process group so that
// its plugin goes with it.
type daemonProc struct {
	w   *world
	cmd *exec.Cmd
	// Started is just before fork/exec; ReadyAt when the ready file was
	// first seen naming this process.
	Started, ReadyAt time.Time
	// log holds what the daemon writes to stdout and stderr.
	log     string
	done    chan struct{}
	waitErr error
}

// startServe starts `wcache serve` of model on the world's mock device
// and returns once its ready file names it (an error if it exits first or
// readyTimeout passes). onStart, when set, runs right after fork/exec.
func (w *world) startServe(ctx context.Context, model string, onStart func(pid int)) (*daemonProc, error) {
	return w.startServeArgs(ctx, []string{"--model", model}, onStart)
}

// startServeArgs is startServe with serve's arguments after --gpu-id
// (--model DIR, or --takeover).
func (w *world) startServeArgs(ctx context.Context, args []string, onStart func(pid int)) (*daemonProc, error) {
	bin := filepath.Join(w.o.BinDir, "wcache")
	d := &daemonProc{w: w, done: make(chan struct{}), log: filepath.Join(w.Root, "serve.log")}
	out, err := os.Create(d.log)
	if err != nil {
		return nil, fmt.Errorf("daemon log: %w", err)
	}
	defer out.Close() // the child has its own descriptor
	d.cmd = exec.Command(bin, append([]string{"serve", "--backend", "mock", "--gpu-id", "0"}, args...)...)
	d.cmd.Env = w.Env()
	d.cmd.Stdout, d.cmd.Stderr = out, out
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
		onStart(d.PID())
	}
	if err := d.waitReady(ctx); err != nil {
		d.kill()
		return nil, err
	}
	return d, nil
}

// PID is the daemon's process id.
func (d *daemonProc) PID() int { return d.cmd.Process.Pid }

// waitReady polls for the ready file until it names this process.
func (d *daemonProc) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(readyTimeout)
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	for {
		if _, err := os.Stat(d.w.Paths.Ready); err == nil {
			now := time.Now()
			if r, err := daemonfile.ReadReady(d.w.Paths.Ready); err == nil && r.PID == d.PID() {
				d.ReadyAt = now
				return nil
			}
		}
		select {
		case <-d.done:
			return fmt.Errorf("wcache serve exited before it was ready (%v):\n%s", d.waitErr, d.output())
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wcache serve not ready after %s:\n%s", readyTimeout, d.output())
		}
	}
}

// Stop sends SIGTERM and waits for the daemon to drain and exit; after
// stopTimeout it kills the whole process group. It returns the daemon's
// exit error (nil for a clean exit); a second Stop returns the same.
func (d *daemonProc) Stop() error {
	select {
	case <-d.done:
		return d.waitErr
	default:
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop wcache serve: %w", err)
	}
	select {
	case <-d.done:
		return d.withOutput(d.waitErr)
	case <-time.After(stopTimeout):
		d.kill()
		return fmt.Errorf("wcache serve (pid %d) still running %s after SIGTERM: killed", d.PID(), stopTimeout)
	}
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
	return fmt.Errorf("%w\nwcache serve (pid %d) output:\n%s", err, d.PID(), d.output())
}

// PluginPID finds the daemon's backend plugin: its child process.
func (d *daemonProc) PluginPID() (int, error) {
	kids, err := childPIDs(d.PID())
	if err != nil {
		return 0, err
	}
	if len(kids) != 1 {
		return 0, fmt.Errorf("pid %d has children %v, want one backend plugin", d.PID(), kids)
	}
	return kids[0], nil
}

// output is the tail of what the daemon wrote so far.
func (d *daemonProc) output() string {
	b, _ := os.ReadFile(d.log)
	return tail(string(b))
}

// tail is the last 3000 bytes of s.
func tail(s string) string {
	const n = 3000
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Embedded Python helpers, written into the scenario's world before use.
var (
	//go:embed py/read_numpy.py
	pyReadNumpy string
	//go:embed py/attach_torch.py
	pyAttachTorch string
)

// freshResult is one fresh process: what it measured inside (the JSON
// object it prints last on stdout) and the wall time of the whole process
// from fork/exec to exit as its parent saw it.
type freshResult struct {
	HelperResult
	Versions map[string]string `json:"versions,omitempty"`
	Wall     time.Duration     `json:"-"`
}

// runFresh runs cmd to completion and decodes its result.
func runFresh(cmd *exec.Cmd) (freshResult, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return freshResult{}, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, tail(stderr.String()))
	}
	out := strings.TrimSpace(stdout.String())
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	var r freshResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return freshResult{}, fmt.Errorf("%s: result %q: %w", strings.Join(cmd.Args, " "), out, err)
	}
	r.Wall = wall
	return r, nil
}

// helperCmd is a fresh Go process running the helper mode with args, in
// the world's environment.
func (w *world) helperCmd(ctx context.Context, mode string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, w.o.HelperArgv[1:]...), mode), args...)
	cmd := exec.CommandContext(ctx, w.o.HelperArgv[0], argv...)
	cmd.Env = w.Env(w.o.HelperEnv...)
	return cmd
}

// pythonCmd is a fresh Python process running an embedded script (written
// into the world's root on first use) with args, importing the wcache
// client from the source tree.
func (w *world) pythonCmd(ctx context.Context, name, source string, args ...string) (*exec.Cmd, error) {
	path := filepath.Join(w.Root, name)
	if err := os.WriteFile(path, []byte(source), 0o600); err != nil {
		return nil, fmt.Errorf("python helper %s: %w", name, err)
	}
	src, err := filepath.Abs(filepath.Join(w.o.RepoDir, "clients", "python", "src"))
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, w.o.Python, append([]string{path}, args...)...)
	cmd.Env = w.Env("PYTHONPATH="+src, "PYTHONDONTWRITEBYTECODE=1")
	return cmd, nil
}
