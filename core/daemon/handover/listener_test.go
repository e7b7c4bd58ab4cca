package handover

import (
	"errors"
	"net"
	"path/filepath"
	"testing"
)

// TestListenerPausesAndResumesOnANewSocket: a paused
// Listener closes its socket without failing Accept, serves the
// socket given to Resume, and fails with net.ErrClosed once closed.
func TestListenerPausesAndResumesOnANewSocket(t *testing.T) {
	dir := t.TempDir()
	listen := func(name string) *net.UnixListener {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, name), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	first := listen("a")
	h := NewListener(first)

	next := acceptOnce(h)
	h.Pause() // Accept, blocked on the first socket, must wait, not fail
	if _, err := net.Dial("unix", filepath.Join(dir, "a")); err == nil {
		t.Fatal("the paused listener's socket still accepts connections")
	}
	select {
	case a := <-next:
		t.Fatalf("Accept returned while paused: %v, %v", a.c, a.err)
	default:
	}
	h.Resume(listen("b"))
	c, err := net.Dial("unix", filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := <-next
	if a.err != nil {
		t.Fatalf("Accept after resume: %v", a.err)
	}
	a.c.Close()
	closeEndsAccept(t, h)
}

// TestPeerListenerPausesAndResumesOnTheSameSocket: a paused PeerListener
// keeps its socket open (a duplicate descriptor goes to the successor),
// leaves a connection in the backlog without failing Accept, accepts it
// after Resume, and fails with net.ErrClosed once closed.
func TestPeerListenerPausesAndResumesOnTheSameSocket(t *testing.T) {
	tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := NewPeerListener(tl)

	next := acceptOnce(p)
	f, err := p.Pause() // Accept, blocked on the socket, must wait, not fail
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	c, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatalf("the paused listener's socket is closed: %v", err)
	}
	defer c.Close()
	select {
	case a := <-next:
		t.Fatalf("Accept returned while paused: %v, %v", a.c, a.err)
	default:
	}
	p.Resume()
	a := <-next
	if a.err != nil {
		t.Fatalf("Accept after resume: %v", a.err)
	}
	if a.c.RemoteAddr().String() != c.LocalAddr().String() {
		t.Errorf("accepted %v, want the connection dialled while paused (%v)", a.c.RemoteAddr(), c.LocalAddr())
	}
	a.c.Close()
	closeEndsAccept(t, p)
}

// accepted is what one Accept returned.
type accepted struct {
	c   net.Conn
	err error
}

// pausable is what both listeners' tests use of them.
type pausable interface {
	Accept() (net.Conn, error)
	Close() error
}

// acceptOnce calls l.Accept in a goroutine; its result arrives on the
// channel.
func acceptOnce(l pausable) <-chan accepted {
	next := make(chan accepted, 1)
	go func() { c, err := l.Accept(); next <- accepted{c, err} }()
	return next
}

// closeEndsAccept closes l while an Accept waits and requires that Accept
// to fail with net.ErrClosed.
func closeEndsAccept(t *testing.T, l pausable) {
	t.Helper()
	next := acceptOnce(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if a := <-next; !errors.Is(a.err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, %v", a.c, a.err)
	}
}
