package daemon

import (
	"fmt"
	"slices"
	"strings"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// named reports whether s names generations by a field.
func named(s EvictSelector) bool { return s.Model != "" || s.ConfigDigest != "" || s.Generation != 0 }

// selects reports whether s names g.
func selects(s EvictSelector, g *generation) bool {
	return (s.Model == "" || s.Model == g.model || s.Model == g.config.Model) &&
		(s.ConfigDigest == "" || s.ConfigDigest == g.digest) &&
		(s.Generation == 0 || s.Generation == g.id)
}

// SelectError refuses an evict whose selector names no generation
// (NOT_FOUND), or that names none while the daemon holds several
// (FAILED_PRECONDITION: Held lists them, "digest (model)").
type SelectError struct {
	Selector EvictSelector
	Held     []string
}

func (e *SelectError) Error() string {
	if named(e.Selector) {
		return fmt.Sprintf("no generation matches %s; the daemon holds: %s", e.Selector, heldList(e.Held))
	}
	return fmt.Sprintf("the daemon holds %d generations (%s): name one (model, config digest or generation) or all",
		len(e.Held), heldList(e.Held))
}

func heldList(h []string) string {
	if len(h) == 0 {
		return "nothing"
	}
	return strings.Join(h, ", ")
}

// selectForEvict returns the generations sel names (none: the daemon holds
// nothing), or the refusal.
func (r *registry) selectForEvict(sel EvictSelector) ([]*generation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return nil, &PublishConflictError{Reason: ConflictBusy, State: StateStopping}
	}
	var held []string
	var out []*generation
	for _, g := range r.gens {
		held = append(held, fmt.Sprintf("%s (%s)", g.digest, g.config.Model))
		if sel.All || selects(sel, g) {
			out = append(out, g)
		}
	}
	switch {
	case len(r.gens) == 0:
		return nil, nil
	case !sel.All && !named(sel) && len(r.gens) > 1:
		return nil, &SelectError{Selector: sel, Held: held}
	case len(out) == 0:
		return nil, &SelectError{Selector: sel, Held: held}
	}
	for _, g := range out {
		if g.state == StatePublishing {
			return nil, &PublishConflictError{Reason: ConflictInProgress, State: g.state, PublisherPID: g.publisher.peer.PID}
		}
	}
	return out, nil
}

// beginEvict makes gens drain: attaches to them are refused and each of
// their leases gets notice. It returns their lease count, and false when
// the daemon is stopping.
func (r *registry) beginEvict(gens []*generation, notice *daemonv1.Notice) (EvictResult, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return EvictResult{}, false
	}
	for _, g := range gens {
		g.drainers++
		g.state = StateDraining
	}
	res := EvictResult{Leases: len(r.listLocked(gens))}
	r.notifyLocked(gens, notice)
	r.changedLocked()
	return res, true
}

// endEvict ends the drain of gens. With drained (no lease left) it
// forgets those still held and returns them for the caller to free; false
// when the daemon is stopping (it frees everything itself). Without, the
// generations no other evict drains serve again.
func (r *registry) endEvict(gens []*generation, drained bool) ([]*generation, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*generation
	for _, g := range gens {
		g.drainers--
		switch {
		case r.stopping || !slices.Contains(r.gens, g):
		case drained:
			r.removeGenLocked(g)
			out = append(out, g)
		case g.drainers == 0:
			g.state = StateServing
			for _, l := range r.listLocked([]*generation{g}) {
				l.noticed = r.drainers > 0
			}
		}
	}
	r.changedLocked()
	return out, !r.stopping
}

// leaseInfosOf lists the leases of gens, oldest first.
func (r *registry) leaseInfosOf(gens []*generation) []LeaseInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return leaseInfos(r.listLocked(gens))
}
