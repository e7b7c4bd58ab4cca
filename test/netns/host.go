package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/test/testproc"
)

// Start starts o's program inside h as testproc.Start does: through
// `ip netns exec <Name> <o.Path> <o.Args…>`, which execs the program after
// entering the namespace, so the started process is the program itself
// (its pid, its process group: Process.Kill reaches it). The child gets
// SIGKILL when the test process dies (PR_SET_PDEATHSIG), so a killed test
// run leaves no server behind. The kernel sends that signal when the
// *thread* that forked the child ends, and Go ends threads (those of
// DialContext and Listen, for one), so the child is started from a thread
// locked for as long as the child lives.
func (h *Host) Start(o testproc.Options) (*testproc.Process, error) {
	o.Args = append([]string{"netns", "exec", h.Name, o.Path}, o.Args...)
	o.Path = h.ip
	edit := o.Edit
	o.Edit = func(cmd *exec.Cmd) {
		if edit != nil {
			edit(cmd)
		}
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Setpgid = true
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	type started struct {
		p   *testproc.Process
		err error
	}
	ch := make(chan started, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		p, err := testproc.Start(o)
		ch <- started{p, err}
		if err == nil {
			<-p.Done()
		}
	}()
	s := <-ch
	return s.p, s.err
}

// DialContext opens a connection from h, as net.Dialer does from the
// caller's namespace (the signature of peer.TCPTransport.Dial). Use
// addresses, not names: the lookup would run outside h.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.inside(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen listens in h, as net.Listen does in the caller's namespace.
func (h *Host) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := h.inside(func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// inside runs fn on a goroutine locked to its OS thread, after that thread
// entered h's network namespace. A socket belongs to the namespace it was created
// in, whichever thread uses it later. The goroutine exits still locked,
// so the runtime ends the thread rather than running anything else in the
// namespace.
func (h *Host) inside(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(h.Path())
		if err != nil {
			errc <- fmt.Errorf("netns %s: %w", h.Name, err)
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		if err != nil {
			errc <- fmt.Errorf("netns %s: setns: %w", h.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
