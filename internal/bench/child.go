package bench

// Every child process the harness starts: `wcache serve` daemons (on the
// child-process harness shared with the e2e tests, internal/testproc),
// fresh Go helper processes (this binary re-executed) and Python scripts.

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/wcache/wcache/internal/testproc"
)

// Timeouts of daemon processes: generous, a healthy daemon of a few GiB is
// ready in seconds even on a busy two-core machine. readyPoll is how often
// the ready file is looked for: the resolution of start-to-ready.
const (
	readyTimeout = 10 * time.Minute
	stopTimeout  = 60 * time.Second
	readyPoll    = 250 * time.Microsecond
)

// daemonProc is a running `wcache serve` (a testproc.Process, in its own
// process group so that its plugin goes with it).
type daemonProc struct {
	*testproc.Process
	w *world
	// ReadyAt is when the ready file was first seen naming this process
	// (Started is just before fork/exec).
	ReadyAt time.Time
}

// startServe starts `wcache serve` of model on the world's mock device
// and returns once its ready file names it (an error if it exits first or
// readyTimeout passes). onStart, when set, runs right after fork/exec.
func (w *world) startServe(ctx context.Context, model string, onStart func(pid int)) (*daemonProc, error) {
	var args []string
	if model != "" {
		args = []string{"--model", model}
	}
	return w.startServeArgs(ctx, args, onStart)
}

// startServeArgs is startServe with serve's arguments after --gpu-id
// (--model DIR, or --takeover).
func (w *world) startServeArgs(ctx context.Context, extra []string, onStart func(pid int)) (*daemonProc, error) {
	args := append([]string{"serve", "--backend", w.backend(), "--gpu-id", "0"}, extra...)
	p, err := testproc.Start(testproc.Options{Path: filepath.Join(w.o.BinDir, "wcache"), Args: args,
		Env: w.Env(), Poll: readyPoll})
	if err != nil {
		return nil, err
	}
	d := &daemonProc{Process: p, w: w}
	if onStart != nil {
		onStart(d.PID())
	}
	if _, err := p.WaitReady(ctx, w.Paths.Ready, readyTimeout); err != nil {
		p.Kill()
		return nil, err
	}
	d.ReadyAt = time.Now()
	return d, nil
}

// Stop sends SIGTERM and waits for the daemon to drain and exit; after
// stopTimeout it kills the whole process group. It returns nil for a
// clean exit, else an error with the daemon's output.
func (d *daemonProc) Stop() error { return d.Process.Stop(stopTimeout) }

// withOutput adds the tail of the daemon's output to err (nil stays nil).
func (d *daemonProc) withOutput(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w\nwcache serve (pid %d) output:\n%s", err, d.PID(), tail(d.Output()))
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
