package registry

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

// Peer is the process of a lease or a publish, as its peer credentials
// name it.
type Peer struct {
	PID int32
	UID uint32
}

// Metrics receives the lease count and the daemon's state on every change
// (the part of the daemon's metrics sink the registry feeds).
type Metrics interface {
	Leases(n int)
	StateChanged(s State)
}

// noMetrics is the sink of a registry nobody gave one.
type noMetrics struct{}

func (noMetrics) Leases(int)         {}
func (noMetrics) StateChanged(State) {}

// Lease is one attached client: an open Attach stream.
type Lease[M, F any] struct {
	ID         uint64
	Peer       Peer
	ClientName string
	Since      time.Time

	// Notices carries notices to the lease's stream (buffered; a notice
	// that finds the buffer full is dropped, the client already has one).
	Notices chan *daemonv1.Notice
	// Ended is closed when the daemon ends the lease; EndErr says why.
	Ended  chan struct{}
	EndErr error
	// noticed is true once the current drain notified this lease
	// (guarded by mu).
	noticed bool
	// Token is the lease's descriptor channel secret, gen its generation
	// and m the manifest it was given (whose descriptors the channel hands
	// out).
	Token    [fdchannel.TokenSize]byte
	Gen      *Generation[M, F]
	Manifest M
}

// Registry holds the generations, the leases and the daemon's state.
type Registry[M, F any] struct {
	mu     sync.Mutex
	next   uint64
	leases map[uint64]*Lease[M, F]
	// gens are the generations held, oldest first.
	gens []*Generation[M, F]
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
	// by config digest (RecordAttachFallback), at most maxAttachFallbacks;
	// lastAttachFallback the latest.
	attachFallbacks    map[string]string
	lastAttachFallback string
}

// maxAttachFallbacks bounds registry.attachFallbacks (the map is cleared
// when full: a reason is a diagnosis, not state).
const maxAttachFallbacks = 64

// New is an empty registry: no generation, no lease, serving state
// StateEmpty; M is the daemon's manifest type and F its publish
// descriptors' (both opaque to the registry).
func New[M, F any]() *Registry[M, F] {
	return &Registry[M, F]{leases: map[uint64]*Lease[M, F]{}, changed: make(chan struct{}), metrics: noMetrics{}, reported: -1}
}

// stateLocked is the daemon's state, from its generations': stopping;
// draining during a Stop's drain; else serving while any generation
// serves, draining while one drains, publishing while one is published,
// empty when it holds none. r.mu must be held.
func (r *Registry[M, F]) stateLocked() State {
	switch {
	case r.stopping:
		return StateStopping
	case r.drainers > 0:
		return StateDraining
	}
	st := StateEmpty
	for _, g := range r.gens {
		switch {
		case g.State == StateServing:
			return StateServing
		case g.State == StateDraining:
			st = StateDraining
		case g.State == StatePublishing && st == StateEmpty:
			st = StatePublishing
		}
	}
	return st
}

// changedLocked reports a changed state and wakes every waiter. r.mu must
// be held.
func (r *Registry[M, F]) changedLocked() {
	if st := r.stateLocked(); st != r.reported {
		r.reported = st
		r.metrics.StateChanged(st)
	}
	r.broadcastLocked()
}

// SetMetrics makes m receive the lease count and the state from now on,
// starting with their current values.
func (r *Registry[M, F]) SetMetrics(m Metrics) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics = m
	m.Leases(len(r.leases))
	r.reported = r.stateLocked()
	m.StateChanged(r.reported)
}

// broadcastLocked wakes every waiter. r.mu must be held.
func (r *Registry[M, F]) broadcastLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// addLocked registers a new lease on g, which serves. r.mu must be held.
func (r *Registry[M, F]) addLocked(g *Generation[M, F], p Peer, clientName string, now time.Time) *Lease[M, F] {
	r.next++
	l := &Lease[M, F]{ID: r.next, Peer: p, ClientName: clientName, Since: now,
		Notices: make(chan *daemonv1.Notice, 1), Ended: make(chan struct{}), Gen: g, Manifest: g.Manifest}
	rand.Read(l.Token[:]) // never fails (crypto/rand since Go 1.24)
	r.leases[l.ID] = l
	r.metrics.Leases(len(r.leases))
	return l
}

// Lookup returns the live lease id, or nil.
func (r *Registry[M, F]) Lookup(id uint64) *Lease[M, F] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leases[id]
}

// Remove forgets a lease (its stream ended).
func (r *Registry[M, F]) Remove(l *Lease[M, F]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.leases[l.ID]; ok {
		delete(r.leases, l.ID)
		r.metrics.Leases(len(r.leases))
		r.broadcastLocked()
	}
}

// List returns the leases ordered by id.
func (r *Registry[M, F]) List() []*Lease[M, F] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.listLocked(nil)
}

// listLocked returns the leases of gens (nil: of every generation)
// ordered by id. r.mu must be held.
func (r *Registry[M, F]) listLocked(gens []*Generation[M, F]) []*Lease[M, F] {
	out := make([]*Lease[M, F], 0, len(r.leases))
	for _, l := range r.leases {
		if gens == nil || slices.Contains(gens, l.Gen) {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// CurrentState is the daemon's state.
func (r *Registry[M, F]) CurrentState() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stateLocked()
}

// notifyLocked sends notice to every lease of gens (nil: every lease) the
// current drain has not notified yet. r.mu must be held.
func (r *Registry[M, F]) notifyLocked(gens []*Generation[M, F], notice *daemonv1.Notice) {
	for _, l := range r.listLocked(gens) {
		if l.noticed {
			continue
		}
		l.noticed = true
		select {
		case l.Notices <- notice:
		default:
		}
	}
}

// BeginDrain (a Stop) enters the draining state (unless stopping), ends
// every publish in progress and sends notice to every lease the drain has
// not notified yet. It reports false when the daemon is already stopping.
func (r *Registry[M, F]) BeginDrain(notice *daemonv1.Notice) bool {
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

// EndDrain ends one Stop's drain. When the last one gave up (the daemon
// keeps serving), attaches are accepted again and a later drain notifies
// again (but a lease of a generation an evict drains stays notified).
func (r *Registry[M, F]) EndDrain() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainers--
	if r.drainers == 0 && !r.stopping {
		for _, l := range r.leases {
			if l.Gen.State != StateDraining {
				l.noticed = false
			}
		}
	}
	r.changedLocked()
}

// Stop enters the stopping state, ends every publish in progress and ends
// every lease with err. It returns the number of leases it ended.
func (r *Registry[M, F]) Stop(err error) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopping = true
	r.endPublishersLocked()
	n := 0
	for _, l := range r.leases {
		select {
		case <-l.Ended:
		default:
			l.EndErr = err
			close(l.Ended)
			n++
		}
	}
	r.changedLocked()
	return n
}

// WaitEmpty waits until no lease of gens (nil: no lease at all) is left
// (true), the daemon is stopping (true: someone else forced it), or ctx
// ends (false).
func (r *Registry[M, F]) WaitEmpty(ctx context.Context, gens []*Generation[M, F]) bool {
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
