package handover

import (
	"net"
	"sync"
)

// pauseGate is where a pausable listener's Accept waits: while paused and
// not closed it waits; resuming or closing wakes it, and once closed Accept
// fails with net.ErrClosed. Listener and PeerListener embed it; mu also
// guards what a listener keeps beside the flags (Listener's socket), so
// the methods named ...Locked are called with mu held. The zero value is
// an open gate.
type pauseGate struct {
	mu     sync.Mutex
	cond   *sync.Cond // made on first use, under mu
	paused bool
	closed bool
}

// waitLocked waits while the gate is paused and not closed; it returns
// net.ErrClosed once the gate is closed, else nil.
func (g *pauseGate) waitLocked() error {
	for g.paused && !g.closed {
		g.condLocked().Wait()
	}
	if g.closed {
		return net.ErrClosed
	}
	return nil
}

// wakeLocked wakes every waitLocked, after paused or closed changed.
func (g *pauseGate) wakeLocked() { g.condLocked().Broadcast() }

func (g *pauseGate) condLocked() *sync.Cond {
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
	return g.cond
}
