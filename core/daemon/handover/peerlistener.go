package handover

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// PeerListener is the peer endpoint's TCP listener (--peer-listen). A
// takeover passes the very socket to the successor (descriptor passing
// with "released"), so the port never closes and no
// successor fails on "address already in use": while the successor
// starts, the old daemon pauses (stops accepting, keeps the socket), and
// resumes if the successor fails. Pending connections wait in the
// kernel's backlog for whichever process accepts next.
type PeerListener struct {
	pauseGate
	l *net.TCPListener
}

// NewPeerListener accepts on l.
func NewPeerListener(l *net.TCPListener) *PeerListener { return &PeerListener{l: l} }

// Accept returns the next connection; while paused it waits for Resume.
// After Close it fails with net.ErrClosed.
func (p *PeerListener) Accept() (net.Conn, error) {
	for {
		p.mu.Lock()
		err := p.waitLocked()
		p.mu.Unlock()
		if err != nil {
			return nil, err
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
			continue // pause's deadline: wait for Resume
		}
		return nil, err
	}
}

// Pause stops accepting (the socket stays open) and returns a duplicate
// of the socket's descriptor for the successor; the caller closes it.
func (p *PeerListener) Pause() (*os.File, error) {
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

// Resume accepts again (a successor failed before it served).
func (p *PeerListener) Resume() {
	_ = p.l.SetDeadline(time.Time{})
	p.mu.Lock()
	p.paused = false
	p.wakeLocked()
	p.mu.Unlock()
}

// Close closes this process's descriptor of the socket (a successor's
// duplicate keeps it listening).
func (p *PeerListener) Close() error {
	p.mu.Lock()
	p.closed = true
	p.wakeLocked()
	p.mu.Unlock()
	return p.l.Close()
}

// Addr is the socket's address.
func (p *PeerListener) Addr() net.Addr { return p.l.Addr() }
