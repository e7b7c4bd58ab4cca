package daemon

import (
	"crypto/rand"
	"fmt"
	"slices"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"

	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/internal/poll"
)

// publisher is the client filling the daemon while it is StatePublishing.
type publisher struct {
	peer       PeerInfo
	clientName string
	since      time.Time
	// ended is closed when the daemon stops under the publish.
	ended chan struct{}
	// id and token let the publisher fetch the plan's writable
	// descriptors on the descriptor channel (OpPublish); files are set
	// once the plan is made (guarded by registry.mu).
	id    uint64
	token [fdchannel.TokenSize]byte
	files *handleFiles
	// gen is the generation being published.
	gen *generation
	// filled is non-nil when the daemon itself fills gen from a peer
	// (attachfill.go), and closed when that fill ends, filled or not.
	filled chan struct{}
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

// beginPublish adds a generation for a publish of cfg by p and returns it
// with its publisher. A generation that an attach with cfg would get
// already exists is a *PublishConflictError: serving (ConflictHoldsWeights,
// with its digest), being published (ConflictInProgress) or draining
// (ConflictBusy); a daemon that stops or drains for a Stop is ConflictBusy.
// Other generations are not touched: a publish of another config adds one
// beside them. compare is how the new generation will be matched.
func (r *registry) beginPublish(p PeerInfo, clientName string, cfg cacheconfig.Config,
	compare func(daemon, client cacheconfig.Config) []cacheconfig.FieldDiff, now time.Time) (*publisher, *generation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.beginPublishLocked(p, clientName, cfg, compare, now)
}

// beginPeerFill begins a publish of cfg by the daemon itself (p: its own
// process), to be filled from a peer (attachfill.go), as beginPublish does
// (its *PublishConflictError when a generation cfg attaches to exists) —
// unless a peer fill of a generation cfg attaches to is in progress: then
// it begins nothing and returns wait, closed when that fill ends.
func (r *registry) beginPeerFill(p PeerInfo, clientName string, cfg cacheconfig.Config,
	compare func(daemon, client cacheconfig.Config) []cacheconfig.FieldDiff, now time.Time) (pub *publisher, g *generation, wait <-chan struct{}, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.gens {
		if o.state == StatePublishing && o.publisher != nil && o.publisher.filled != nil && o.matches(cfg) {
			return nil, nil, o.publisher.filled, nil
		}
	}
	pub, g, err = r.beginPublishLocked(p, clientName, cfg, compare, now)
	if err == nil {
		pub.filled = make(chan struct{})
	}
	return pub, g, nil, err
}

// recordAttachFallback records why a peer fill of an attach of the config
// of digest failed: the fill_fallback of an empty daemon's Status, and of
// the generation a publish of that config then adds (install).
func (r *registry) recordAttachFallback(digest, reason string) {
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
func (r *registry) takeAttachFallbackLocked(digest string) string {
	reason := r.attachFallbacks[digest]
	delete(r.attachFallbacks, digest)
	r.lastAttachFallback = ""
	return reason
}

// beginPublishLocked is beginPublish with r.mu held.
func (r *registry) beginPublishLocked(p PeerInfo, clientName string, cfg cacheconfig.Config,
	compare func(daemon, client cacheconfig.Config) []cacheconfig.FieldDiff, now time.Time) (*publisher, *generation, error) {
	if r.stopping || r.drainers > 0 {
		return nil, nil, &PublishConflictError{Reason: ConflictBusy, State: r.stateLocked()}
	}
	for _, g := range r.gens {
		if !g.matches(cfg) {
			continue
		}
		switch g.state {
		case StatePublishing:
			return nil, nil, &PublishConflictError{Reason: ConflictInProgress, State: g.state, PublisherPID: g.publisher.peer.PID}
		case StateServing:
			return nil, nil, &PublishConflictError{Reason: ConflictHoldsWeights, State: g.state, ConfigDigest: g.digest}
		default:
			return nil, nil, &PublishConflictError{Reason: ConflictBusy, State: g.state}
		}
	}
	r.next++
	pub := &publisher{peer: p, clientName: clientName, since: now, ended: make(chan struct{}), id: r.next}
	rand.Read(pub.token[:]) // never fails (crypto/rand since Go 1.24)
	g := &generation{state: StatePublishing, publisher: pub, config: cfg, configProto: cfg.ToProto(),
		digest: cfg.Digest(), model: "", compare: compare, started: now}
	pub.gen = g
	r.addGenLocked(g)
	return pub, g, nil
}

// setPublishFiles makes files what the publish's descriptor requests get.
func (r *registry) setPublishFiles(pub *publisher, files *handleFiles) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pub.files = files
}

// publishFor returns the publish in progress whose id is id, and its
// descriptors, or nil.
func (r *registry) publishFor(id uint64) (*publisher, *handleFiles) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.gens {
		if g.state == StatePublishing && g.publisher != nil && g.publisher.id == id {
			return g.publisher, g.publisher.files
		}
	}
	return nil, nil
}

// finishPublish ends pub's publish: with commit, its generation serves
// (its allocations, manifest, load and tensors set by the caller's fill,
// under r.mu; its admission counted as allocated, its start now, and the
// fallback recorded for its config (recordAttachFallback) its own unless
// fill gave it one); without, it is forgotten. It reports false (and
// changes nothing) when pub's publish was already ended (the daemon is
// stopping).
func (r *registry) finishPublish(pub *publisher, commit bool, fill func(g *generation)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := pub.gen
	if g.publisher != pub || g.state != StatePublishing || !slices.Contains(r.gens, g) {
		return false
	}
	if r.stopping || pub.isEnded() {
		commit = false
	}
	g.publisher = nil
	pub.end()
	if !commit {
		r.removeGenLocked(g)
		return false
	}
	fill(g)
	g.planned, g.started = 0, time.Now()
	if reason := r.takeAttachFallbackLocked(g.digest); g.load.FillFallback == "" {
		// A peer fill of an attach of this config failed before.
		g.load.FillFallback = reason
	}
	g.state = StateServing
	r.changedLocked()
	return true
}

// abortPublish forgets pub's generation when it is still being published;
// it reports whether it did.
func (r *registry) abortPublish(pub *publisher) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := pub.gen
	if g.state != StatePublishing || !slices.Contains(r.gens, g) {
		return false
	}
	g.publisher = nil
	pub.end()
	r.removeGenLocked(g)
	return true
}

// endPublishersLocked ends every publish in progress (the daemon stops).
// r.mu must be held.
func (r *registry) endPublishersLocked() {
	for _, g := range r.gens {
		if g.publisher != nil {
			g.publisher.end()
		}
	}
}

// end closes ended (once).
func (p *publisher) end() {
	select {
	case <-p.ended:
	default:
		close(p.ended)
	}
}

// isEnded reports whether end was called.
func (p *publisher) isEnded() bool { return poll.Closed(p.ended) }
