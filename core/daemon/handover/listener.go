package handover

import "net"

// Listener is a daemon's gRPC listener: it can be paused (its
// socket closed, Accept waiting) and resumed on a new socket without
// ending Serve, so that a daemon handing over to a successor keeps its
// gRPC connections, and so its leases, while it has no socket, and can
// serve on if the successor fails.
type Listener struct {
	pauseGate              // its mu also guards l
	l         net.Listener // the socket served now
}

// NewListener serves on l.
func NewListener(l net.Listener) *Listener { return &Listener{l: l} }

// Accept returns the next connection; while paused it waits for Resume.
// It fails with net.ErrClosed once Close was called.
func (h *Listener) Accept() (net.Conn, error) {
	for {
		h.mu.Lock()
		if err := h.waitLocked(); err != nil {
			h.mu.Unlock()
			return nil, err
		}
		l := h.l
		h.mu.Unlock()
		c, err := l.Accept()
		if err == nil {
			return c, nil
		}
		h.mu.Lock()
		swapped := !h.closed && (h.paused || h.l != l)
		h.mu.Unlock()
		if !swapped {
			return nil, err
		}
	}
}

// Pause closes the socket (Accept waits).
func (h *Listener) Pause() {
	h.mu.Lock()
	h.paused = true
	l := h.l
	h.mu.Unlock()
	_ = l.Close()
}

// Resume serves on l.
func (h *Listener) Resume(l net.Listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.l, h.paused = l, false
	h.wakeLocked()
}

// Close closes the socket for good.
func (h *Listener) Close() error {
	h.mu.Lock()
	h.closed = true
	l := h.l
	h.wakeLocked()
	h.mu.Unlock()
	return l.Close()
}

// Addr is the socket's address.
func (h *Listener) Addr() net.Addr {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.l.Addr()
}
