package testproc

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wcache/wcache/internal/childproc"
)

// Group starts processes with shared defaults and stops them all at once.
// The zero Group is not usable; make one with NewGroup.
type Group struct {
	def Options

	mu    sync.Mutex
	procs []*Process
}

// NewGroup makes a group whose processes default to def: Start and Run
// take def's Path, Env, Dir and Echo where their own Options leave them
// empty.
func NewGroup(def Options) *Group {
	return &Group{def: def}
}

// withDefaults fills o's empty fields from the group's defaults.
func (g *Group) withDefaults(o Options) Options {
	if o.Path == "" {
		o.Path = g.def.Path
	}
	if o.Env == nil {
		o.Env = g.def.Env
	}
	if o.Dir == "" {
		o.Dir = g.def.Dir
	}
	if o.Echo == nil {
		o.Echo = g.def.Echo
	}
	return o
}

// Start starts a process in the background (see the package Start) and
// remembers it for StopAll.
func (g *Group) Start(o Options) (*Process, error) { return g.adopt(Start(g.withDefaults(o))) }

// adopt remembers p, just started, for StopAll (an error passes through).
func (g *Group) adopt(p *Process, err error) (*Process, error) {
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
	return p, nil
}

// Result is the outcome of a command run to completion.
type Result struct {
	Args   []string
	Stdout string
	Stderr string
	Code   int
	// Wall is fork/exec to exit, as the parent saw it.
	Wall time.Duration
}

func (r Result) String() string {
	return fmt.Sprintf("wcache %s: exit %d\nstdout:\n%s\nstderr:\n%s",
		strings.Join(r.Args, " "), r.Code, r.Stdout, r.Stderr)
}

// ErrTimeout: a command run with Run did not finish in time.
var ErrTimeout = errors.New("command timed out")

// Run runs a command to completion in a process group of its own, at most
// timeout (then the whole group is killed and the error wraps ErrTimeout,
// with the Result so far). A non-zero exit is not an error: it is in
// Result.Code. o is as for Start; Echo is ignored.
func (g *Group) Run(timeout time.Duration, o Options) (Result, error) {
	o = g.withDefaults(o)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.Path, o.Args...)
	cmd.Env, cmd.Dir = o.Env, o.Dir
	var stdout, stderr childproc.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if o.Edit != nil {
		o.Edit(cmd)
	}
	start := time.Now()
	err := cmd.Run()
	args := o.Args
	res := Result{Args: args, Stdout: stdout.String(), Stderr: stderr.String(), Wall: time.Since(start)}
	var xe *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return res, fmt.Errorf("%s: %w after %s", res, ErrTimeout, timeout)
	case err == nil:
	case errors.As(err, &xe):
		res.Code = xe.ExitCode()
	default:
		return res, fmt.Errorf("wcache %s: %w", strings.Join(args, " "), err)
	}
	return res, nil
}

// StopAll stops every process the group started, all at once: SIGTERM to
// each, up to grace for all of them together, then SIGKILL to every
// process group. It returns the processes that had to be killed, and
// forgets them all.
func (g *Group) StopAll(grace time.Duration) (killed []*Process) {
	g.mu.Lock()
	procs := g.procs
	g.procs = nil
	g.mu.Unlock()
	for _, p := range procs {
		if !p.Exited() {
			_ = p.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	for _, p := range procs {
		if !p.Exited() {
			select {
			case <-p.done:
			case <-deadline.C:
				killed = append(killed, p)
				// The grace is shared: a later process still running
				// gets none.
				deadline.Reset(0)
			}
		}
		p.Kill()
	}
	return killed
}

// Processes lists the processes started and not yet stopped.
func (g *Group) Processes() []*Process {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*Process(nil), g.procs...)
}
