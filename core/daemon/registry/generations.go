package registry

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/sdk"
)

// The registry's operations on the generations it holds: each takes the
// registry's lock itself, and a callback given to one runs under it (the
// critical section of the caller's work and of the registry's state is
// one).

// Add appends gens (addGenLocked), all in one critical section.
func (r *Registry[M, F]) Add(gens ...*Generation[M, F]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range gens {
		r.addGenLocked(g)
	}
}

// Count is the number of generations held.
func (r *Registry[M, F]) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.gens)
}

// All is the generations held, oldest first (a copy of the list).
func (r *Registry[M, F]) All() []*Generation[M, F] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.gens)
}

// Serves reports whether g is one of the generations held and serving.
func (r *Registry[M, F]) Serves(g *Generation[M, F]) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return g.State == StateServing && slices.Contains(r.gens, g)
}

// ForEachServing calls fn, under r.mu, with every serving generation,
// oldest first.
func (r *Registry[M, F]) ForEachServing(fn func(g *Generation[M, F])) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.gens {
		if g.State == StateServing {
			fn(g)
		}
	}
}

// FirstServing returns the oldest serving generation match accepts (nil:
// none), after calling take with it; both run under r.mu.
func (r *Registry[M, F]) FirstServing(match func(g *Generation[M, F]) bool, take func(g *Generation[M, F])) *Generation[M, F] {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.gens {
		if g.State == StateServing && match(g) {
			take(g)
			return g
		}
	}
	return nil
}

// EachByID calls visit, under r.mu, with every generation in id order and
// whether p (its pid and uid) holds a lease on it, until visit returns
// false.
func (r *Registry[M, F]) EachByID(p Peer, visit func(g *Generation[M, F], leased bool) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := map[*Generation[M, F]]bool{}
	for _, o := range r.leases {
		if o.Peer.PID == p.PID && o.Peer.UID == p.UID {
			held[o.Gen] = true
		}
	}
	gens := slices.Clone(r.gens)
	slices.SortFunc(gens, func(a, b *Generation[M, F]) int { return cmp.Compare(a.ID, b.ID) })
	for _, g := range gens {
		if !visit(g, held[g]) {
			return
		}
	}
}

// ForEachSettled calls fn, under r.mu, with every generation but those
// being published (their publish's handler owns them).
func (r *Registry[M, F]) ForEachSettled(fn func(g *Generation[M, F])) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.gens {
		if g.State != StatePublishing {
			fn(g)
		}
	}
}

// WhyNotServing says why not every generation serves ("" when all do):
// the daemon stops or drains for a Stop, a generation is published or
// drained, or why reports something of a serving one. why runs under r.mu.
func (r *Registry[M, F]) WhyNotServing(why func(g *Generation[M, F]) string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping || r.drainers > 0 {
		return fmt.Sprintf("the daemon is %s", r.stateLocked())
	}
	for _, g := range r.gens {
		if g.State != StateServing {
			return fmt.Sprintf("generation %d is %s", g.ID, g.State)
		}
		if s := why(g); s != "" {
			return s
		}
	}
	return ""
}

// ReplaceAllocs makes imp's allocations every generation's own, all under
// r.mu (so the generations cannot change meanwhile); the first error
// leaves every generation's as it was. It returns the number of
// generations.
func (r *Registry[M, F]) ReplaceAllocs(imp func(g *Generation[M, F]) ([]sdk.AllocationID, error)) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([][]sdk.AllocationID, len(r.gens))
	for gi, g := range r.gens {
		var err error
		if ids[gi], err = imp(g); err != nil {
			return 0, err
		}
	}
	for gi, g := range r.gens {
		g.Allocs = ids[gi]
	}
	return len(ids), nil
}

// Admit records that need bytes are admitted for g (g.Planned) when check
// accepts them, given what was admitted but not allocated yet (pending);
// check runs under r.mu.
func (r *Registry[M, F]) Admit(g *Generation[M, F], need uint64, check func(pending uint64) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := check(r.pendingLocked()); err != nil {
		return err
	}
	g.Planned = need
	return nil
}

// SetAllocated records the bytes the backend reserved for g's arenas.
func (r *Registry[M, F]) SetAllocated(g *Generation[M, F], reserved uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g.Load.AllocatedBytes = reserved
}

// Unadmit counts g as holding nothing (its allocations were freed).
func (r *Registry[M, F]) Unadmit(g *Generation[M, F]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g.Planned, g.Load.AllocatedBytes = 0, 0
}

// SetCompare makes compare how attaches are matched against g.
func (r *Registry[M, F]) SetCompare(g *Generation[M, F], compare func(daemon, client cacheconfig.Config) []cacheconfig.FieldDiff) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g.Compare = compare
}

// Describe describes every generation, oldest first, and the primary one
// (primaryLocked; nil when none), in one critical section.
func (r *Registry[M, F]) Describe() ([]GenerationInfo, *GenerationInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]GenerationInfo, len(r.gens))
	var primary *GenerationInfo
	p := r.primaryLocked()
	for i, g := range r.gens {
		out[i] = r.genInfoLocked(g)
		if g == p {
			primary = &out[i]
		}
	}
	return out, primary
}

// PrimaryServed is the primary generation's model and config digest, ""
// when there is none or it is being published (the ready file's).
func (r *Registry[M, F]) PrimaryServed() (model, digest string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.primaryLocked(); g != nil && g.State != StatePublishing {
		return g.Model, g.Digest
	}
	return "", ""
}

// Held is what every generation holds on the device, summed.
func (r *Registry[M, F]) Held() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.heldLocked()
}

// StatusView is what Status reports of the registry: read under r.mu, and
// valid only while status's fn runs.
type StatusView[M, F any] struct {
	State State
	// Held is what every generation holds on the device, summed.
	Held uint64
	// Primary is the generation Status's single-generation fields
	// describe (primaryLocked; nil when none).
	Primary *Generation[M, F]
	// AttachFallback is why the latest peer fill of an attach failed
	// (RecordAttachFallback; "" once a generation was installed since).
	AttachFallback string
	// Leases are every lease, by id; gens every generation, oldest first.
	Leases []*Lease[M, F]
	Gens   []*Generation[M, F]
	// LeasesOf lists the leases of g, by id.
	LeasesOf func(g *Generation[M, F]) []*Lease[M, F]
}

// Holdings calls fn with the device memory held (Held's) and the
// generations, under the lock: what a metrics report needs, without the
// lease list a Status view builds. fn must not call back into r.
func (r *Registry[M, F]) Holdings(fn func(held uint64, gens []*Generation[M, F])) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(r.heldLocked(), r.gens)
}

// Status calls fn with the registry's StatusView, under r.mu.
func (r *Registry[M, F]) Status(fn func(v StatusView[M, F])) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(StatusView[M, F]{State: r.stateLocked(), Held: r.heldLocked(), Primary: r.primaryLocked(),
		AttachFallback: r.lastAttachFallback, Leases: r.listLocked(nil), Gens: r.gens,
		LeasesOf: func(g *Generation[M, F]) []*Lease[M, F] { return r.listLocked([]*Generation[M, F]{g}) }})
}
