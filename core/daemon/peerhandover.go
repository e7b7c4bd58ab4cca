package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// pausableListener is the peer endpoint's TCP listener (--peer-listen). A
// takeover passes the very socket to the successor (descriptor passing
// with "released", takeover.go), so the port never closes and no
// successor fails on "address already in use": while the successor
// starts, the old daemon pauses (stops accepting, keeps the socket), and
// resumes if the successor fails. Pending connections wait in the
// kernel's backlog for whichever process accepts next.
type pausableListener struct {
	l      *net.TCPListener
	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	closed bool
}

func newPausableListener(l *net.TCPListener) *pausableListener {
	p := &pausableListener{l: l}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// Accept returns the next connection; while paused it waits for resume.
// After Close it fails with net.ErrClosed.
func (p *pausableListener) Accept() (net.Conn, error) {
	for {
		p.mu.Lock()
		for p.paused && !p.closed {
			p.cond.Wait()
		}
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
		c, err := p.l.Accept()
		if err == nil {
			// Even one accepted as the pause began: this process serves
			// until it hands over.
			return c, nil
		}
		p.mu.Lock()
		woken := p.paused && !p.closed
		p.mu.Unlock()
		var ne net.Error
		if woken && errors.As(err, &ne) && ne.Timeout() {
			continue // pause's deadline: wait for resume
		}
		return nil, err
	}
}

// pause stops accepting (the socket stays open) and returns a duplicate
// of the socket's descriptor for the successor; the caller closes it.
func (p *pausableListener) pause() (*os.File, error) {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
	// Wake an Accept in progress; it then waits on the condition.
	_ = p.l.SetDeadline(time.Now())
	f, err := p.l.File()
	if err != nil {
		return nil, fmt.Errorf("peer endpoint: duplicate the listener: %w", err)
	}
	return f, nil
}

// resume accepts again (a successor failed before it served).
func (p *pausableListener) resume() {
	_ = p.l.SetDeadline(time.Time{})
	p.mu.Lock()
	p.paused = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Close closes this process's descriptor of the socket (a successor's
// duplicate keeps it listening).
func (p *pausableListener) Close() error {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	return p.l.Close()
}

// Addr is the socket's address.
func (p *pausableListener) Addr() net.Addr { return p.l.Addr() }

// peerListen returns the peer endpoint's listener for addr
// (--peer-listen): the listener inherited from the daemon taken over when
// it is bound to that address (same port, same or unspecified IP), else a
// new one. The inherited file is closed either way (the listener has its
// own descriptor).
func (d *Daemon) peerListen(addr string, inherited *os.File) (*pausableListener, error) {
	if inherited != nil {
		l, err := net.FileListener(inherited)
		_ = inherited.Close()
		tl, ok := l.(*net.TCPListener)
		switch {
		case err != nil:
			d.log.Warn("peer endpoint: the listener of the daemon taken over is unusable; listening anew", "error", err)
		case !ok:
			_ = l.Close()
			d.log.Warn("peer endpoint: the daemon taken over passed no TCP listener; listening anew", "type", fmt.Sprintf("%T", l))
		case !sameListenAddr(addr, tl.Addr()):
			_ = l.Close()
			d.log.Info("peer endpoint: the daemon taken over listened elsewhere; listening anew", "theirs", tl.Addr().String(), "ours", addr)
		default:
			d.log.Info("peer endpoint: serving on the listener of the daemon taken over", "addr", tl.Addr().String())
			return newPausableListener(tl), nil
		}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return newPausableListener(l.(*net.TCPListener)), nil
}

// sameListenAddr reports whether a listener bound to got is what
// --peer-listen spec asks for: the same port (never 0: "any port" asks
// for a new one), and the same IP or, for a spec without one, the
// unspecified address.
func sameListenAddr(spec string, got net.Addr) bool {
	want, err := net.ResolveTCPAddr("tcp", spec)
	g, ok := got.(*net.TCPAddr)
	if err != nil || !ok || want.Port == 0 || want.Port != g.Port {
		return false
	}
	if want.IP == nil || want.IP.IsUnspecified() {
		return g.IP.IsUnspecified()
	}
	return want.IP.Equal(g.IP)
}

// pausePeer pauses the peer endpoint for a takeover and returns a
// duplicate of its socket to pass to the successor (nil, nil without an
// endpoint).
func (d *Daemon) pausePeer() (*os.File, error) {
	if d.peer.lis == nil {
		return nil, nil
	}
	return d.peer.lis.pause()
}

// resumePeer accepts peers again after a takeover that did not happen.
func (d *Daemon) resumePeer() {
	if d.peer.lis != nil {
		d.peer.lis.resume()
	}
}
