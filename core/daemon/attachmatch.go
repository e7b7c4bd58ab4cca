package daemon

import (
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
)

// attachAnswers are the daemon's answers to matchAttach's outcomes, each
// called under registry.mu (what the daemon holds cannot change between
// the comparison and the answer).
type attachAnswers struct {
	// accept checks a serving generation whose config matches (handle
	// kinds, content proof): nil error takes the lease.
	accept func(g *generation) (AttachFailure, error)
	// busy: the daemon stops or drains (st).
	busy func(st State) (AttachFailure, error)
	// empty: nothing serves the config; st is what the daemon does, and
	// publisherPID who publishes (0: nobody).
	empty func(st State, publisherPID int32) (AttachFailure, error)
	// mismatch: serving generations exist, none with the config; nearest
	// differs in the fewest fields (diffs) of the serving ones compared.
	mismatch func(diffs []cacheconfig.FieldDiff, nearest *generation, compared int) (AttachFailure, error)
}

// matchAttach matches cfg against every generation, all under r.mu, and
// registers a lease for p on the serving generation whose config matches
// and which a.accept takes. Otherwise, in this order: a daemon that stops
// or drains for a Stop, or a matching generation that drains (an evict),
// is a.busy; the first refusal of a.accept when no other matching
// generation takes the attach (several generations may share a config —
// the same weights from two folders, whose paths the config does not
// compare — and a proof names the files of one of them); a matching
// generation being published, or a daemon that serves nothing, a.empty
// (busy when it drains); else a.mismatch with the nearest serving
// generation.
func (r *registry) matchAttach(cfg cacheconfig.Config, p PeerInfo, name string, a attachAnswers) (*lease, AttachFailure, error) {
	miss := func(why AttachFailure, err error) (*lease, AttachFailure, error) { return nil, why, err }
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping || r.drainers > 0 {
		// Before the comparison: weights on their way out are no answer to
		// "which config", and an engine of the next model must wait, not stop.
		return miss(a.busy(r.stateLocked()))
	}
	var nearest *generation
	var nearestDiffs []cacheconfig.FieldDiff
	serving := 0
	var publishing *generation
	var refusal error
	var refused AttachFailure
	for _, g := range r.gens {
		// Loaded, published as stored, or an engine's own weights
		// (compareFor).
		diffs := g.compare(g.config, cfg)
		switch g.state {
		case StateServing:
			serving++
			if len(diffs) == 0 {
				why, err := a.accept(g)
				if err == nil {
					return r.addLocked(g, p, name, time.Now()), "", nil
				}
				if refusal == nil {
					refusal, refused = err, why
				}
				continue
			}
			if nearest == nil || len(diffs) < len(nearestDiffs) {
				nearest, nearestDiffs = g, diffs
			}
		case StateDraining:
			if len(diffs) == 0 {
				return miss(a.busy(StateDraining))
			}
		case StatePublishing:
			if len(diffs) == 0 && publishing == nil {
				publishing = g
			}
		}
	}
	switch {
	case refusal != nil:
		return nil, refused, refusal
	case publishing != nil:
		return miss(a.empty(StatePublishing, publishing.publisher.peer.PID))
	case nearest == nil:
		st, pid := r.stateLocked(), int32(0)
		for _, g := range r.gens {
			if g.publisher != nil {
				st, pid = StatePublishing, g.publisher.peer.PID
				break
			}
		}
		if st == StateDraining {
			return miss(a.busy(st))
		}
		return miss(a.empty(st, pid))
	}
	return miss(a.mismatch(nearestDiffs, nearest, serving))
}
