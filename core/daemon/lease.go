package daemon

import (
	"context"
	"crypto/rand"
	"slices"
	"sort"
	"sync"
	"time"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/fdchannel"
)

// State is the daemon's serving state, or a generation's (publishing,
// serving, draining).
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
	// token is the lease's descriptor channel secret, gen its generation
	// and m the manifest it was given (whose descriptors the channel hands
	// out).
	token [fdchannel.TokenSize]byte
	gen   *generation
	m     *manifest
}

// registry holds the generations, the leases and the daemon's state.
type registry struct {
	mu     sync.Mutex
	next   uint64
	leases map[uint64]*lease
	// gens are the generations held, oldest first (generation.go).
	gens []*generation
	// stopping: the daemon is shutting down; drainers counts the
	// daemon-wide drains (Stop) in progress.
	stopping bool
	drainers int
	// changed is closed (and replaced) whenever a lease goes away or a
	// state changes, waking waiters.
	changed chan struct{}
	// metrics receives the lease count and the daemon's state on every
	// change, under mu (never nil; set before the daemon serves);
	// reported is the state it was last given.
	metrics  Metrics
	reported State
	// attachFallbacks are the reasons of the failed peer fills of attaches
	// by config digest (attachfill.go), at most maxAttachFallbacks;
	// lastAttachFallback the latest.
	attachFallbacks    map[string]string
	lastAttachFallback string
}

// maxAttachFallbacks bounds registry.attachFallbacks (the map is cleared
// when full: a reason is a diagnosis, not state).
const maxAttachFallbacks = 64

func newRegistry() *registry {
	return &registry{leases: map[uint64]*lease{}, changed: make(chan struct{}), metrics: noMetrics{}, reported: -1}
}

// stateLocked is the daemon's state, from its generations': stopping;
// draining during a Stop's drain; else serving while any generation
// serves, draining while one drains, publishing while one is published,
// empty when it holds none. r.mu must be held.
func (r *registry) stateLocked() State {
	switch {
	case r.stopping:
		return StateStopping
	case r.drainers > 0:
		return StateDraining
	}
	st := StateEmpty
	for _, g := range r.gens {
		switch {
		case g.state == StateServing:
			return StateServing
		case g.state == StateDraining:
			st = StateDraining
		case g.state == StatePublishing && st == StateEmpty:
			st = StatePublishing
		}
	}
	return st
}

// changedLocked reports a changed state and wakes every waiter. r.mu must
// be held.
func (r *registry) changedLocked() {
	if st := r.stateLocked(); st != r.reported {
		r.reported = st
		r.metrics.StateChanged(st)
	}
	r.broadcastLocked()
}

// setMetrics makes m receive the lease count and the state from now on,
// starting with their current values.
func (r *registry) setMetrics(m Metrics) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics = m
	m.Leases(len(r.leases))
	r.reported = r.stateLocked()
	m.StateChanged(r.reported)
}

// broadcastLocked wakes every waiter. r.mu must be held.
func (r *registry) broadcastLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// addLocked registers a new lease on g, which serves. r.mu must be held.
func (r *registry) addLocked(g *generation, p PeerInfo, clientName string, now time.Time) *lease {
	r.next++
	l := &lease{id: r.next, peer: p, clientName: clientName, since: now,
		notices: make(chan *daemonv1.Notice, 1), ended: make(chan struct{}), gen: g, m: g.manifest}
	rand.Read(l.token[:]) // never fails (crypto/rand since Go 1.24)
	r.leases[l.id] = l
	r.metrics.Leases(len(r.leases))
	return l
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
	return r.listLocked(nil)
}

// listLocked returns the leases of gens (nil: of every generation)
// ordered by id. r.mu must be held.
func (r *registry) listLocked(gens []*generation) []*lease {
	out := make([]*lease, 0, len(r.leases))
	for _, l := range r.leases {
		if gens == nil || slices.Contains(gens, l.gen) {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// currentState is the daemon's state.
func (r *registry) currentState() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stateLocked()
}

// notifyLocked sends notice to every lease of gens (nil: every lease) the
// current drain has not notified yet. r.mu must be held.
func (r *registry) notifyLocked(gens []*generation, notice *daemonv1.Notice) {
	for _, l := range r.listLocked(gens) {
		if l.noticed {
			continue
		}
		l.noticed = true
		select {
		case l.notices <- notice:
		default:
		}
	}
}

// beginDrain (a Stop) enters the draining state (unless stopping), ends
// every publish in progress and sends notice to every lease the drain has
// not notified yet. It reports false when the daemon is already stopping.
func (r *registry) beginDrain(notice *daemonv1.Notice) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return false
	}
	r.drainers++
	r.endPublishersLocked() // a stop ends a publish in progress
	r.notifyLocked(nil, notice)
	r.changedLocked()
	return true
}

// endDrain ends one Stop's drain. When the last one gave up (the daemon
// keeps serving), attaches are accepted again and a later drain notifies
// again (but a lease of a generation an evict drains stays notified).
func (r *registry) endDrain() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainers--
	if r.drainers == 0 && !r.stopping {
		for _, l := range r.leases {
			if l.gen.state != StateDraining {
				l.noticed = false
			}
		}
	}
	r.changedLocked()
}

// stop enters the stopping state, ends every publish in progress and ends
// every lease with err. It returns the number of leases it ended.
func (r *registry) stop(err error) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopping = true
	r.endPublishersLocked()
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
	r.changedLocked()
	return n
}

// waitEmpty waits until no lease of gens (nil: no lease at all) is left
// (true), the daemon is stopping (true: someone else forced it), or ctx
// ends (false).
func (r *registry) waitEmpty(ctx context.Context, gens []*generation) bool {
	for {
		r.mu.Lock()
		if r.stopping || len(r.listLocked(gens)) == 0 {
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
