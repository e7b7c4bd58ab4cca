package daemon

import (
	"crypto/rand"
	"fmt"
	"time"

	"github.com/wcache/wcache/core/fdchannel"
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
}

// ConflictReason says why a Publish or an Evict was refused because of the
// daemon's state.
type ConflictReason int

// The reasons of a *PublishConflictError.
const (
	// ConflictInProgress: another client is publishing (ABORTED).
	ConflictInProgress ConflictReason = iota + 1
	// ConflictHoldsWeights: the daemon already serves weights; evict
	// first (FAILED_PRECONDITION).
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
		return fmt.Sprintf("daemon already holds weights (config %s): attach to them, or `wcache evict` first", e.ConfigDigest)
	default:
		return fmt.Sprintf("daemon is %s", e.State)
	}
}

// setState sets the state (a daemon started empty, before it serves).
func (r *registry) setState(s State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setStateLocked(s)
}

// stateAndPublisher is the state and, while publishing, the publisher's
// pid.
func (r *registry) stateAndPublisher() (State, int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.publisher != nil {
		return r.state, r.publisher.peer.PID
	}
	return r.state, 0
}

// beginPublish moves an empty daemon to StatePublishing for p. Any other
// state is a *PublishConflictError (digest names what a serving daemon
// holds).
func (r *registry) beginPublish(p PeerInfo, clientName, digest string, now time.Time) (*publisher, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.state {
	case StateEmpty:
	case StatePublishing:
		return nil, &PublishConflictError{Reason: ConflictInProgress, State: r.state, PublisherPID: r.publisher.peer.PID}
	case StateServing:
		return nil, &PublishConflictError{Reason: ConflictHoldsWeights, State: r.state, ConfigDigest: digest}
	default:
		return nil, &PublishConflictError{Reason: ConflictBusy, State: r.state}
	}
	r.next++
	r.publisher = &publisher{peer: p, clientName: clientName, since: now, ended: make(chan struct{}), id: r.next}
	rand.Read(r.publisher.token[:]) // never fails (crypto/rand since Go 1.24)
	r.setStateLocked(StatePublishing)
	return r.publisher, nil
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
	if r.state != StatePublishing || r.publisher == nil || r.publisher.id != id {
		return nil, nil
	}
	return r.publisher, r.publisher.files
}

// finishPublish ends pub's publish with the state to: StateServing on a
// commit, StateEmpty otherwise. It reports false (and changes nothing)
// when pub's publish was already ended (the daemon is stopping).
func (r *registry) finishPublish(pub *publisher, to State) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.publisher != pub || r.state != StatePublishing {
		return false
	}
	r.endPublisherLocked()
	r.setStateLocked(to)
	return true
}

// endPublisherLocked ends the publish in progress, if any. r.mu must be
// held.
func (r *registry) endPublisherLocked() {
	if r.publisher != nil {
		close(r.publisher.ended)
		r.publisher = nil
	}
}

// endEvict ends the drain of an Evict whose leases are gone: the daemon is
// empty (unless it is stopping, which it stays). It reports whether the
// daemon may free its weights, i.e. it is not stopping.
func (r *registry) endEvict() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainers--
	if r.state == StateStopping {
		return false
	}
	for _, l := range r.leases {
		l.noticed = false
	}
	r.setStateLocked(StateEmpty)
	return true
}
