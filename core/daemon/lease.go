package daemon

import (
	"context"
	"crypto/rand"
	"sort"
	"sync"
	"time"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/fdchannel"
)

// State is the daemon's serving state.
type State int

const (
	// StateServing: attaches are accepted.
	StateServing State = iota
	// StateDraining: a drain is waiting for leases; attaches are refused.
	StateDraining
	// StateStopping: shutting down; attaches are refused, leases ended.
	StateStopping
	// StateEmpty: the daemon holds no weights; attaches are NOT_FOUND, a
	// Publish may begin.
	StateEmpty
	// StatePublishing: a Publish is filling the daemon; attaches are
	// NOT_FOUND, other publishers ABORTED.
	StatePublishing
)

// String is the state's name as Status reports it: "empty", "publishing",
// "serving", "draining" or "stopping".
func (s State) String() string {
	switch s {
	case StateServing:
		return "serving"
	case StateDraining:
		return "draining"
	case StateEmpty:
		return "empty"
	case StatePublishing:
		return "publishing"
	default:
		return "stopping"
	}
}

// lease is one attached client: an open Attach stream.
type lease struct {
	id         uint64
	peer       PeerInfo
	clientName string
	since      time.Time

	// notices carries notices to the lease's stream (buffered; a notice
	// that finds the buffer full is dropped, the client already has one).
	notices chan *daemonv1.Notice
	// ended is closed when the daemon ends the lease; endErr says why.
	ended  chan struct{}
	endErr error
	// noticed is true once the current drain notified this lease
	// (guarded by registry.mu).
	noticed bool
	// token is the lease's descriptor channel secret, and m the manifest
	// it was given (whose descriptors the channel hands out).
	token [fdchannel.TokenSize]byte
	m     *manifest
}

// registry holds the leases and the serving state.
type registry struct {
	mu       sync.Mutex
	next     uint64
	leases   map[uint64]*lease
	state    State
	drainers int
	// changed is closed (and replaced) whenever a lease goes away or the
	// state changes, waking waiters.
	changed chan struct{}
	// metrics receives the lease count and the state on every change,
	// under mu (never nil; set before the daemon serves).
	metrics Metrics
	// publisher is the publish in progress while state is
	// StatePublishing (see publishstate.go).
	publisher *publisher
}

func newRegistry() *registry {
	return &registry{leases: map[uint64]*lease{}, changed: make(chan struct{}), metrics: noMetrics{}}
}

// setStateLocked changes the state, reports it and wakes every waiter.
// r.mu must be held.
func (r *registry) setStateLocked(s State) {
	r.state = s
	r.metrics.StateChanged(s)
	r.broadcastLocked()
}

// setMetrics makes m receive the lease count and the state from now on,
// starting with their current values.
func (r *registry) setMetrics(m Metrics) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics = m
	m.Leases(len(r.leases))
	m.StateChanged(r.state)
}

// broadcastLocked wakes every waiter. r.mu must be held.
func (r *registry) broadcastLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// add registers a new lease, unless the daemon is draining or stopping (the
// state is returned then, with a nil lease).
func (r *registry) add(p PeerInfo, clientName string, now time.Time, m *manifest) (*lease, State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != StateServing {
		return nil, r.state
	}
	r.next++
	l := &lease{id: r.next, peer: p, clientName: clientName, since: now,
		notices: make(chan *daemonv1.Notice, 1), ended: make(chan struct{}), m: m}
	rand.Read(l.token[:]) // never fails (crypto/rand since Go 1.24)
	r.leases[l.id] = l
	r.metrics.Leases(len(r.leases))
	return l, StateServing
}

// lookup returns the live lease id, or nil.
func (r *registry) lookup(id uint64) *lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leases[id]
}

// remove forgets a lease (its stream ended).
func (r *registry) remove(l *lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.leases[l.id]; ok {
		delete(r.leases, l.id)
		r.metrics.Leases(len(r.leases))
		r.broadcastLocked()
	}
}

// list returns the leases ordered by id.
func (r *registry) list() []*lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*lease, 0, len(r.leases))
	for _, l := range r.leases {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// currentState is the serving state.
func (r *registry) currentState() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// beginDrain enters the draining state (unless stopping) and sends notice
// to every lease the drain has not notified yet. It reports false when the
// daemon is already stopping.
func (r *registry) beginDrain(notice *daemonv1.Notice) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == StateStopping {
		return false
	}
	r.drainers++
	r.endPublisherLocked() // a stop ends a publish in progress
	if r.state != StateDraining {
		r.setStateLocked(StateDraining)
	}
	for _, l := range r.leases {
		if l.noticed {
			continue
		}
		l.noticed = true
		select {
		case l.notices <- notice:
		default:
		}
	}
	return true
}

// endDrain ends one drain. When the last drain gave up (the daemon keeps
// serving), attaches are accepted again and a later drain notifies again.
func (r *registry) endDrain() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainers--
	if r.drainers == 0 && r.state == StateDraining {
		for _, l := range r.leases {
			l.noticed = false
		}
		r.setStateLocked(StateServing)
	}
}

// stop enters the stopping state and ends every lease with err. It returns
// the number of leases it ended.
func (r *registry) stop(err error) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != StateStopping {
		r.setStateLocked(StateStopping)
	}
	r.endPublisherLocked()
	n := 0
	for _, l := range r.leases {
		select {
		case <-l.ended:
		default:
			l.endErr = err
			close(l.ended)
			n++
		}
	}
	return n
}

// waitEmpty waits until no lease is left (true), the daemon is stopping
// (true: someone else forced it), or ctx ends (false).
func (r *registry) waitEmpty(ctx context.Context) bool {
	for {
		r.mu.Lock()
		if len(r.leases) == 0 || r.state == StateStopping {
			r.mu.Unlock()
			return true
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}
