package registry

import (
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
)

// AttachAnswers are the daemon's answers to MatchAttach's outcomes (W: how
// the daemon names a failed attach), each called under the registry's
// lock (what the daemon holds cannot change between the comparison and the
// answer).
type AttachAnswers[M, F, W any] struct {
	// Accept checks a serving generation whose config matches (handle
	// kinds, content proof): nil error takes the lease.
	Accept func(g *Generation[M, F]) (W, error)
	// Busy: the daemon stops or drains (st).
	Busy func(st State) (W, error)
	// Empty: nothing serves the config; st is what the daemon does, and
	// publisherPID who publishes (0: nobody).
	Empty func(st State, publisherPID int32) (W, error)
	// Mismatch: serving generations exist, none with the config; nearest
	// differs in the fewest fields (diffs) of the serving ones compared.
	Mismatch func(diffs []cacheconfig.FieldDiff, nearest *Generation[M, F], compared int) (W, error)
}

// MatchAttach matches cfg against every generation, all under r.mu, and
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
func MatchAttach[M, F, W any](r *Registry[M, F], cfg cacheconfig.Config, p Peer, name string, a AttachAnswers[M, F, W]) (*Lease[M, F], W, error) {
	miss := func(why W, err error) (*Lease[M, F], W, error) { return nil, why, err }
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping || r.drainers > 0 {
		// Before the comparison: weights on their way out are no answer to
		// "which config", and an engine of the next model must wait, not stop.
		return miss(a.Busy(r.stateLocked()))
	}
	var nearest *Generation[M, F]
	var nearestDiffs []cacheconfig.FieldDiff
	serving := 0
	var publishing *Generation[M, F]
	var refusal error
	var refused W
	for _, g := range r.gens {
		// Loaded, published as stored, or an engine's own weights
		// (CompareFor).
		diffs := g.Compare(g.Config, cfg)
		switch g.State {
		case StateServing:
			serving++
			if len(diffs) == 0 {
				why, err := a.Accept(g)
				if err == nil {
					var none W
					return r.addLocked(g, p, name, time.Now()), none, nil
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
				return miss(a.Busy(StateDraining))
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
		return miss(a.Empty(StatePublishing, publishing.Publisher.Peer.PID))
	case nearest == nil:
		st, pid := r.stateLocked(), int32(0)
		for _, g := range r.gens {
			if g.Publisher != nil {
				st, pid = StatePublishing, g.Publisher.Peer.PID
				break
			}
		}
		if st == StateDraining {
			return miss(a.Busy(st))
		}
		return miss(a.Empty(st, pid))
	}
	return miss(a.Mismatch(nearestDiffs, nearest, serving))
}
