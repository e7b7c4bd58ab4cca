package launcher

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// ErrStarterClosed is returned by ExecStarter.Start after Close.
var ErrStarterClosed = errors.New("launcher: starter closed")

// ChildSpec is what the launcher asks a Starter to run for one rank.
type ChildSpec struct {
	Rank       Rank
	DeviceUUID string
	Path       string    // the executable
	Args       []string  // without argv[0]
	Env        []string  // the complete environment
	Output     io.Writer // receives the child's stdout and stderr
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	Code   int            // exit code; -1 when killed by a signal
	Signal syscall.Signal // the signal that killed it; 0 when it exited
}

// Success reports a zero exit code.
func (s ExitStatus) Success() bool { return s.Code == 0 && s.Signal == 0 }

// String is "exit status 1" or "killed by signal terminated".
func (s ExitStatus) String() string {
	if s.Signal != 0 {
		return "killed by signal " + s.Signal.String()
	}
	return fmt.Sprintf("exit status %d", s.Code)
}

// Process is a started child.
type Process interface {
	PID() int
	// Signal sends sig to the process. Signalling an exited process is
	// not an error the launcher cares about; it ignores the result.
	Signal(sig syscall.Signal) error
	// Wait blocks until the process exits. The launcher calls it exactly
	// once, from one goroutine. The error reports a failure to wait or to
	// collect output, not a non-zero exit.
	Wait() (ExitStatus, error)
}

// Starter starts children. Launch uses an ExecStarter unless
// Options.Starter provides another (tests inject fakes).
type Starter interface {
	Start(spec ChildSpec) (Process, error)
}

// outputWaitDelay bounds how long Wait keeps reading a child's output after
// the child exited (a grandchild may hold the pipe open).
const outputWaitDelay = 2 * time.Second

// ExecStarter starts children as real processes, each in a process group of
// its own (so a terminal's Ctrl-C reaches only the launcher, which forwards
// it) and with Pdeathsig=SIGTERM, so that a launcher killed with SIGKILL
// does not leave daemons running.
//
// Pdeathsig fires when the *thread* that forked the child exits, not the
// process, and the Go runtime retires threads: so every child is forked by
// one goroutine that stays locked to its OS thread until Close. Close ends
// that goroutine while it is still locked, which makes the runtime exit its
// thread: any child still running then receives SIGTERM. Call Close once
// every child has exited (Group does).
type ExecStarter struct {
	reqs   chan startRequest
	closed chan struct{}
	exited chan struct{}
}

type startRequest struct {
	spec  ChildSpec
	reply chan startReply
}

type startReply struct {
	proc Process
	err  error
}

// NewExecStarter starts the spawning goroutine.
func NewExecStarter() *ExecStarter {
	s := &ExecStarter{
		reqs:   make(chan startRequest),
		closed: make(chan struct{}),
		exited: make(chan struct{}),
	}
	go s.loop()
	return s
}

func (s *ExecStarter) loop() {
	// Never unlocked: returning while locked retires this thread, which is
	// what delivers Pdeathsig to anything still running.
	runtime.LockOSThread()
	if syscall.Gettid() == syscall.Getpid() {
		// The process's main thread: the runtime never exits it (it parks
		// it instead), so Close would deliver no Pdeathsig. Hand the loop
		// to a goroutine on another thread; while this one holds the main
		// thread locked, the new goroutine cannot be scheduled on it.
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			s.serve()
		}()
		<-locked
		runtime.UnlockOSThread()
		return
	}
	s.serve()
}

// serve forks children on the calling goroutine's locked thread until Close.
func (s *ExecStarter) serve() {
	defer close(s.exited)
	for {
		select {
		case req := <-s.reqs:
			p, err := startExec(req.spec)
			req.reply <- startReply{proc: p, err: err}
		case <-s.closed:
			return
		}
	}
}

// Start forks the child on the locked thread. It fails with
// ErrStarterClosed after Close.
func (s *ExecStarter) Start(spec ChildSpec) (Process, error) {
	req := startRequest{spec: spec, reply: make(chan startReply, 1)}
	select {
	case s.reqs <- req:
	case <-s.closed:
		return nil, ErrStarterClosed
	}
	r := <-req.reply
	return r.proc, r.err
}

// Close stops the spawning goroutine and waits for it; its thread exits,
// and children still running receive SIGTERM. Close is idempotent.
func (s *ExecStarter) Close() {
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
	<-s.exited
}

func startExec(spec ChildSpec) (Process, error) {
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = spec.Env
	out := spec.Output
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.WaitDelay = outputWaitDelay
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Path, err)
	}
	return &execProcess{cmd: cmd}, nil
}

type execProcess struct{ cmd *exec.Cmd }

func (p *execProcess) PID() int { return p.cmd.Process.Pid }

func (p *execProcess) Signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal pid %d: %w", p.PID(), err)
	}
	return nil
}

func (p *execProcess) Wait() (ExitStatus, error) {
	err := p.cmd.Wait()
	st := statusOf(p.cmd.ProcessState)
	var xe *exec.ExitError
	if err != nil && !errors.As(err, &xe) && !errors.Is(err, exec.ErrWaitDelay) {
		return st, fmt.Errorf("wait for pid %d: %w", p.PID(), err)
	}
	return st, nil
}

func statusOf(ps *os.ProcessState) ExitStatus {
	if ps == nil {
		return ExitStatus{Code: -1}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ExitStatus{Code: -1, Signal: ws.Signal()}
	}
	return ExitStatus{Code: ps.ExitCode()}
}
