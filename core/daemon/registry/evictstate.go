package registry

import (
	"fmt"
	"slices"
	"strings"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/client"
)

// Named reports whether s names generations by a field.
func Named(s client.EvictSelector) bool {
	return s.Model != "" || s.ConfigDigest != "" || s.Generation != 0
}

// selects reports whether s names g.
func selects[M, F any](s client.EvictSelector, g *Generation[M, F]) bool {
	return (s.Model == "" || s.Model == g.Model || s.Model == g.Config.Model) &&
		(s.ConfigDigest == "" || s.ConfigDigest == g.Digest) &&
		(s.Generation == 0 || s.Generation == g.ID)
}

// SelectError refuses an evict whose selector names no generation
// (NOT_FOUND), or that names none while the daemon holds several
// (FAILED_PRECONDITION: Held lists them, "digest (model)").
type SelectError struct {
	Selector client.EvictSelector
	Held     []string
}

func (e *SelectError) Error() string {
	if Named(e.Selector) {
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

// SelectForEvict returns the generations sel names (none: the daemon holds
// nothing), or the refusal.
func (r *Registry[M, F]) SelectForEvict(sel client.EvictSelector) ([]*Generation[M, F], error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return nil, &PublishConflictError{Reason: ConflictBusy, State: StateStopping}
	}
	var held []string
	var out []*Generation[M, F]
	for _, g := range r.gens {
		held = append(held, fmt.Sprintf("%s (%s)", g.Digest, g.Config.Model))
		if sel.All || selects(sel, g) {
			out = append(out, g)
		}
	}
	switch {
	case len(r.gens) == 0:
		return nil, nil
	case !sel.All && !Named(sel) && len(r.gens) > 1:
		return nil, &SelectError{Selector: sel, Held: held}
	case len(out) == 0:
		return nil, &SelectError{Selector: sel, Held: held}
	}
	for _, g := range out {
		if g.State == StatePublishing {
			return nil, &PublishConflictError{Reason: ConflictInProgress, State: g.State, PublisherPID: g.Publisher.Peer.PID}
		}
	}
	return out, nil
}

// BeginEvict makes gens drain: attaches to them are refused and each of
// their leases gets notice. It returns their lease count, and false when
// the daemon is stopping.
func (r *Registry[M, F]) BeginEvict(gens []*Generation[M, F], notice *daemonv1.Notice) (client.EvictResult, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return client.EvictResult{}, false
	}
	for _, g := range gens {
		g.drainers++
		g.State = StateDraining
	}
	res := client.EvictResult{Leases: len(r.listLocked(gens))}
	r.notifyLocked(gens, notice)
	r.changedLocked()
	return res, true
}

// EndEvict ends the drain of gens. With drained (no lease left) it
// forgets those still held and returns them for the caller to free; false
// when the daemon is stopping (it frees everything itself). Without, the
// generations no other evict drains serve again.
func (r *Registry[M, F]) EndEvict(gens []*Generation[M, F], drained bool) ([]*Generation[M, F], bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Generation[M, F]
	for _, g := range gens {
		g.drainers--
		switch {
		case r.stopping || !slices.Contains(r.gens, g):
		case drained:
			r.removeGenLocked(g)
			out = append(out, g)
		case g.drainers == 0:
			g.State = StateServing
			for _, l := range r.listLocked([]*Generation[M, F]{g}) {
				l.noticed = r.drainers > 0
			}
		}
	}
	r.changedLocked()
	return out, !r.stopping
}

// LeasesOf lists the leases of gens, oldest first.
func (r *Registry[M, F]) LeasesOf(gens []*Generation[M, F]) []*Lease[M, F] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.listLocked(gens)
}
