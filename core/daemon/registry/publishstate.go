package registry

import (
	"crypto/rand"
	"fmt"
	"slices"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"

	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/internal/poll"
)

// Publisher is the client filling the daemon while it is StatePublishing.
type Publisher[M, F any] struct {
	Peer       Peer
	clientName string
	since      time.Time
	// Ended is closed when the daemon stops under the publish.
	Ended chan struct{}
	// ID and token let the publisher fetch the plan's writable
	// descriptors on the descriptor channel (OpPublish); files are set
	// once the plan is made (guarded by the registry's lock).
	ID    uint64
	Token [fdchannel.TokenSize]byte
	files F
	// gen is the generation being published.
	gen *Generation[M, F]
	// Filled is non-nil when the daemon itself fills gen from a peer
	// (BeginPeerFill), and closed when that fill ends, filled or not.
	Filled chan struct{}
}

// ConflictReason says why a Publish or an Evict was refused because of the
// daemon's state.
type ConflictReason int

// The reasons of a *PublishConflictError.
const (
	// ConflictInProgress: another client is publishing (ABORTED).
	ConflictInProgress ConflictReason = iota + 1
	// ConflictHoldsWeights: the daemon already serves weights for this
	// config; attach to them, or evict them first (FAILED_PRECONDITION).
	ConflictHoldsWeights
	// ConflictBusy: the daemon is draining or stopping
	// (FAILED_PRECONDITION).
	ConflictBusy
)

// PublishConflictError refuses a Publish (or an Evict) that the daemon's
// state does not allow. It travels as the PublishConflict detail.
type PublishConflictError struct {
	Reason       ConflictReason
	State        State
	PublisherPID int32  // ConflictInProgress: who is publishing
	ConfigDigest string // ConflictHoldsWeights: what the daemon holds
}

func (e *PublishConflictError) Error() string {
	switch e.Reason {
	case ConflictInProgress:
		return fmt.Sprintf("publish in progress by pid %d", e.PublisherPID)
	case ConflictHoldsWeights:
		return fmt.Sprintf("daemon already holds weights for this config (%s): attach to them, or `wcache evict --config-digest %s` first", e.ConfigDigest, e.ConfigDigest)
	default:
		return fmt.Sprintf("daemon is %s", e.State)
	}
}

// BeginPublish adds a generation for a publish of cfg by p and returns it
// with its publisher. A generation that an attach with cfg would get
// already exists is a *PublishConflictError: serving (ConflictHoldsWeights,
// with its digest), being published (ConflictInProgress) or draining
// (ConflictBusy); a daemon that stops or drains for a Stop is ConflictBusy.
// Other generations are not touched: a publish of another config adds one
// beside them. compare is how the new generation will be matched.
func (r *Registry[M, F]) BeginPublish(p Peer, clientName string, cfg cacheconfig.Config,
	compare func(daemon, client cacheconfig.Config) []cacheconfig.FieldDiff, now time.Time) (*Publisher[M, F], *Generation[M, F], error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.beginPublishLocked(p, clientName, cfg, compare, now)
}

// BeginPeerFill begins a publish of cfg by the daemon itself (p: its own
// process), to be filled from a peer (an attach the daemon fills), as BeginPublish does
// (its *PublishConflictError when a generation cfg attaches to exists) —
// unless a peer fill of a generation cfg attaches to is in progress: then
// it begins nothing and returns wait, closed when that fill ends.
func (r *Registry[M, F]) BeginPeerFill(p Peer, clientName string, cfg cacheconfig.Config,
	compare func(daemon, client cacheconfig.Config) []cacheconfig.FieldDiff, now time.Time) (pub *Publisher[M, F], g *Generation[M, F], wait <-chan struct{}, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.gens {
		if o.State == StatePublishing && o.Publisher != nil && o.Publisher.Filled != nil && o.matches(cfg) {
			return nil, nil, o.Publisher.Filled, nil
		}
	}
	pub, g, err = r.beginPublishLocked(p, clientName, cfg, compare, now)
	if err == nil {
		pub.Filled = make(chan struct{})
	}
	return pub, g, nil, err
}

// RecordAttachFallback records why a peer fill of an attach of the config
// of digest failed: the fill_fallback of an empty daemon's Status, and of
// the generation a publish of that config then adds (install).
func (r *Registry[M, F]) RecordAttachFallback(digest, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.attachFallbacks) >= maxAttachFallbacks {
		clear(r.attachFallbacks)
	}
	if r.attachFallbacks == nil {
		r.attachFallbacks = map[string]string{}
	}
	r.attachFallbacks[digest], r.lastAttachFallback = reason, reason
}

// takeAttachFallbackLocked returns and forgets the fallback recorded for
// digest ("" none), and the latest one: a generation was installed (a
// publish, a fill), so an empty daemon's Status no longer shows it. r.mu
// must be held.
func (r *Registry[M, F]) takeAttachFallbackLocked(digest string) string {
	reason := r.attachFallbacks[digest]
	delete(r.attachFallbacks, digest)
	r.lastAttachFallback = ""
	return reason
}

// beginPublishLocked is BeginPublish with r.mu held.
func (r *Registry[M, F]) beginPublishLocked(p Peer, clientName string, cfg cacheconfig.Config,
	compare func(daemon, client cacheconfig.Config) []cacheconfig.FieldDiff, now time.Time) (*Publisher[M, F], *Generation[M, F], error) {
	if r.stopping || r.drainers > 0 {
		return nil, nil, &PublishConflictError{Reason: ConflictBusy, State: r.stateLocked()}
	}
	for _, g := range r.gens {
		if !g.matches(cfg) {
			continue
		}
		switch g.State {
		case StatePublishing:
			return nil, nil, &PublishConflictError{Reason: ConflictInProgress, State: g.State, PublisherPID: g.Publisher.Peer.PID}
		case StateServing:
			return nil, nil, &PublishConflictError{Reason: ConflictHoldsWeights, State: g.State, ConfigDigest: g.Digest}
		default:
			return nil, nil, &PublishConflictError{Reason: ConflictBusy, State: g.State}
		}
	}
	r.next++
	pub := &Publisher[M, F]{Peer: p, clientName: clientName, since: now, Ended: make(chan struct{}), ID: r.next}
	rand.Read(pub.Token[:]) // never fails (crypto/rand since Go 1.24)
	g := &Generation[M, F]{State: StatePublishing, Publisher: pub, Config: cfg, ConfigProto: cfg.ToProto(),
		Digest: cfg.Digest(), Model: "", Compare: compare, Started: now}
	pub.gen = g
	r.addGenLocked(g)
	return pub, g, nil
}

// SetPublishFiles makes files what the publish's descriptor requests get.
func (r *Registry[M, F]) SetPublishFiles(pub *Publisher[M, F], files F) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pub.files = files
}

// PublishFor returns the publish in progress whose id is id, and its
// descriptors, or nil.
func (r *Registry[M, F]) PublishFor(id uint64) (*Publisher[M, F], F) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.gens {
		if g.State == StatePublishing && g.Publisher != nil && g.Publisher.ID == id {
			return g.Publisher, g.Publisher.files
		}
	}
	var none F
	return nil, none
}

// FinishPublish ends pub's publish: with commit, its generation serves
// (its allocations, manifest, load and tensors set by the caller's fill,
// under r.mu; its admission counted as allocated, its start now, and the
// fallback recorded for its config (RecordAttachFallback) its own unless
// fill gave it one); without, it is forgotten. It reports false (and
// changes nothing) when pub's publish was already ended (the daemon is
// stopping).
func (r *Registry[M, F]) FinishPublish(pub *Publisher[M, F], commit bool, fill func(g *Generation[M, F])) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := pub.gen
	if g.Publisher != pub || g.State != StatePublishing || !slices.Contains(r.gens, g) {
		return false
	}
	if r.stopping || pub.isEnded() {
		commit = false
	}
	g.Publisher = nil
	pub.end()
	if !commit {
		r.removeGenLocked(g)
		return false
	}
	fill(g)
	g.Planned, g.Started = 0, time.Now()
	if reason := r.takeAttachFallbackLocked(g.Digest); g.Load.FillFallback == "" {
		// A peer fill of an attach of this config failed before.
		g.Load.FillFallback = reason
	}
	g.State = StateServing
	r.changedLocked()
	return true
}

// AbortPublish forgets pub's generation when it is still being published;
// it reports whether it did.
func (r *Registry[M, F]) AbortPublish(pub *Publisher[M, F]) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := pub.gen
	if g.State != StatePublishing || !slices.Contains(r.gens, g) {
		return false
	}
	g.Publisher = nil
	pub.end()
	r.removeGenLocked(g)
	return true
}

// endPublishersLocked ends every publish in progress (the daemon stops).
// r.mu must be held.
func (r *Registry[M, F]) endPublishersLocked() {
	for _, g := range r.gens {
		if g.Publisher != nil {
			g.Publisher.end()
		}
	}
}

// end closes ended (once).
func (p *Publisher[M, F]) end() {
	select {
	case <-p.Ended:
	default:
		close(p.Ended)
	}
}

// isEnded reports whether end was called.
func (p *Publisher[M, F]) isEnded() bool { return poll.Closed(p.Ended) }
