package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin/runner"
)

// procRunner is the go-plugin runner.Runner wcache uses instead of
// go-plugin's own, for three reasons:
//
//   - Pdeathsig: the plugin is started with Pdeathsig=SIGKILL, which the
//     kernel delivers when the *thread* that forked it exits. The fork
//     therefore happens on a goroutine locked to its OS thread that stays
//     alive, blocked in wait(2), exactly as long as the plugin. A host
//     killed with SIGKILL takes that thread with it and the plugin follows.
//   - exit reporting: the process is reaped by that goroutine; Wait, which
//     go-plugin calls only after it has drained stdout and stderr, then
//     reports the exit, so the last log lines are in the ring by then.
//   - process group: the plugin runs in a group of its own, so that signals
//     to the daemon's group reach only the daemon, which drains and then
//     ends the plugin itself.
//   - the handshake line is tapped to name the API version of a plugin
//     that go-plugin refuses.
type procRunner struct {
	logger hclog.Logger
	cmd    *exec.Cmd
	onExit func(pid int, err error)

	stdout *handshakeTap
	stderr *os.File

	pid      int
	killed   atomic.Bool   // Kill was called: a "signal: killed" status is ours
	reaped   chan struct{} // closed once the process is reaped
	waitErr  error         // valid after reaped
	waitOnce sync.Once
}

var _ runner.Runner = (*procRunner)(nil)

func newProcRunner(logger hclog.Logger, cmd *exec.Cmd, onExit func(pid int, err error)) *procRunner {
	return &procRunner{logger: logger, cmd: cmd, onExit: onExit, reaped: make(chan struct{})}
}

// Start forks the plugin from a locked thread (see procRunner).
func (r *procRunner) Start(_ context.Context) error {
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("plugin stdout pipe: %w", err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutR.Close()
		stdoutW.Close()
		return fmt.Errorf("plugin stderr pipe: %w", err)
	}
	r.cmd.Stdin = nil // /dev/null: the plugin has no business with our stdin
	r.cmd.Stdout = stdoutW
	r.cmd.Stderr = stderrW
	if r.cmd.SysProcAttr == nil {
		r.cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	r.cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	// Its own process group: a signal to the daemon's group (a terminal's
	// Ctrl-C, `kill -TERM -PGID`, a supervisor) must not end the plugin
	// under a drain that still serves its memory. The daemon ends it
	// (Close), and the parent-death signal still follows the daemon.
	r.cmd.SysProcAttr.Setpgid = true

	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread must outlive the child. When this
		// goroutine returns (after the child is reaped) the runtime
		// destroys the thread, which is harmless by then.
		runtime.LockOSThread()
		if err := r.cmd.Start(); err != nil {
			runtime.UnlockOSThread()
			started <- err
			return
		}
		started <- nil
		r.waitErr = r.cmd.Wait()
		close(r.reaped)
	}()
	err = <-started
	// The child holds its own copies of the write ends.
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stdoutR.Close()
		stderrR.Close()
		return err
	}
	r.pid = r.cmd.Process.Pid
	r.stdout = &handshakeTap{r: stdoutR}
	r.stderr = stderrR
	r.logger.Debug("plugin started", "path", r.cmd.Path, "pid", r.pid)
	return nil
}

// Wait returns once the process is reaped. go-plugin calls it after it has
// read stdout and stderr to the end.
func (r *procRunner) Wait(_ context.Context) error {
	<-r.reaped
	r.waitOnce.Do(func() {
		r.stdout.Close()
		r.stderr.Close()
		if r.onExit != nil {
			r.onExit(r.pid, r.waitErr)
		}
	})
	return r.waitErr
}

// Kill sends SIGKILL. Killing an already reaped process is not an error.
func (r *procRunner) Kill(_ context.Context) error {
	if r.cmd.Process == nil {
		return nil
	}
	r.killed.Store(true)
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

func (r *procRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *procRunner) Name() string          { return r.cmd.Path }

// ID is the pid, or "" before Start (go-plugin then has nothing to kill).
func (r *procRunner) ID() string {
	if r.pid == 0 {
		return ""
	}
	return strconv.Itoa(r.pid)
}

func (r *procRunner) Diagnose(context.Context) string {
	return fmt.Sprintf("%s did not answer with a go-plugin handshake: is it a wcache backend built with sdk/plugin.Serve for this platform?", r.cmd.Path)
}

func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// handshakeTap passes the plugin's stdout through and remembers its first
// line, the go-plugin handshake "core|app-version|network|address|protocol".
type handshakeTap struct {
	r io.ReadCloser

	mu    sync.Mutex
	first []byte
	done  bool
}

func (h *handshakeTap) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.mu.Lock()
	if !h.done {
		chunk := p[:n]
		if i := strings.IndexByte(string(chunk), '\n'); i >= 0 {
			chunk, h.done = chunk[:i], true
		}
		h.first = append(h.first, chunk...)
		if len(h.first) > 4096 {
			h.done = true
		}
	}
	h.mu.Unlock()
	return n, err
}

func (h *handshakeTap) Close() error { return h.r.Close() }

// firstLine returns what the plugin printed first (up to 4 KiB).
func (h *handshakeTap) firstLine() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.TrimSpace(string(h.first))
}

// apiVersion returns the application API version the plugin announced, or
// false when no complete handshake line was seen.
func (h *handshakeTap) apiVersion() (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done {
		return 0, false
	}
	parts := strings.Split(strings.TrimSpace(string(h.first)), "|")
	if len(parts) < 2 {
		return 0, false
	}
	v, err := strconv.Atoi(parts[1])
	return v, err == nil
}
