package daemon

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/sdk"
)

// The registry's operations on the generations it holds: each takes
// registry.mu itself, and a callback given to one runs under it (the
// critical section of the caller's work and of the registry's state is
// one).

// add appends gens (addGenLocked), all in one critical section.
func (r *registry) add(gens ...*generation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range gens {
		r.addGenLocked(g)
	}
}

// count is the number of generations held.
func (r *registry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.gens)
}

// all is the generations held, oldest first (a copy of the list).
func (r *registry) all() []*generation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.gens)
}

// serves reports whether g is one of the generations held and serving.
func (r *registry) serves(g *generation) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return g.state == StateServing && slices.Contains(r.gens, g)
}

// forEachServing calls fn, under r.mu, with every serving generation,
// oldest first.
func (r *registry) forEachServing(fn func(g *generation)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.gens {
		if g.state == StateServing {
			fn(g)
		}
	}
}

// firstServing returns the oldest serving generation match accepts (nil:
// none), after calling take with it; both run under r.mu.
func (r *registry) firstServing(match func(g *generation) bool, take func(g *generation)) *generation {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.gens {
		if g.state == StateServing && match(g) {
			take(g)
			return g
		}
	}
	return nil
}

// eachByID calls visit, under r.mu, with every generation in id order and
// whether p (its pid and uid) holds a lease on it, until visit returns
// false.
func (r *registry) eachByID(p PeerInfo, visit func(g *generation, leased bool) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := map[*generation]bool{}
	for _, o := range r.leases {
		if o.peer.PID == p.PID && o.peer.UID == p.UID {
			held[o.gen] = true
		}
	}
	gens := slices.Clone(r.gens)
	slices.SortFunc(gens, func(a, b *generation) int { return cmp.Compare(a.id, b.id) })
	for _, g := range gens {
		if !visit(g, held[g]) {
			return
		}
	}
}

// forEachSettled calls fn, under r.mu, with every generation but those
// being published (their publish's handler owns them).
func (r *registry) forEachSettled(fn func(g *generation)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.gens {
		if g.state != StatePublishing {
			fn(g)
		}
	}
}

// whyNotServing says why not every generation serves ("" when all do):
// the daemon stops or drains for a Stop, a generation is published or
// drained, or why reports something of a serving one. why runs under r.mu.
func (r *registry) whyNotServing(why func(g *generation) string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping || r.drainers > 0 {
		return fmt.Sprintf("the daemon is %s", r.stateLocked())
	}
	for _, g := range r.gens {
		if g.state != StateServing {
			return fmt.Sprintf("generation %d is %s", g.id, g.state)
		}
		if s := why(g); s != "" {
			return s
		}
	}
	return ""
}

// replaceAllocs makes imp's allocations every generation's own, all under
// r.mu (so the generations cannot change meanwhile); the first error
// leaves every generation's as it was. It returns the number of
// generations.
func (r *registry) replaceAllocs(imp func(g *generation) ([]sdk.AllocationID, error)) (int, error) {
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
		g.allocs = ids[gi]
	}
	return len(ids), nil
}

// admit records that need bytes are admitted for g (g.planned) when check
// accepts them, given what was admitted but not allocated yet (pending);
// check runs under r.mu.
func (r *registry) admit(g *generation, need uint64, check func(pending uint64) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := check(r.pendingLocked()); err != nil {
		return err
	}
	g.planned = need
	return nil
}

// setAllocated records the bytes the backend reserved for g's arenas.
func (r *registry) setAllocated(g *generation, reserved uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g.load.AllocatedBytes = reserved
}

// unadmit counts g as holding nothing (its allocations were freed).
func (r *registry) unadmit(g *generation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g.planned, g.load.AllocatedBytes = 0, 0
}

// setCompare makes compare how attaches are matched against g.
func (r *registry) setCompare(g *generation, compare func(daemon, client cacheconfig.Config) []cacheconfig.FieldDiff) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g.compare = compare
}

// describe describes every generation, oldest first, and the primary one
// (primaryLocked; nil when none), in one critical section.
func (r *registry) describe() ([]GenerationInfo, *GenerationInfo) {
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

// primaryServed is the primary generation's model and config digest, ""
// when there is none or it is being published (the ready file's).
func (r *registry) primaryServed() (model, digest string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.primaryLocked(); g != nil && g.state != StatePublishing {
		return g.model, g.digest
	}
	return "", ""
}

// held is what every generation holds on the device, summed.
func (r *registry) held() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.heldLocked()
}

// reportDeviceBytes gives m what every generation holds on the device,
// under r.mu.
func (r *registry) reportDeviceBytes(m Metrics) {
	r.mu.Lock()
	defer r.mu.Unlock()
	gens := make([]GenerationBytes, len(r.gens))
	for i, g := range r.gens {
		gens[i] = GenerationBytes{Generation: g.id, Model: g.config.Model, ConfigDigest: g.digest, Bytes: g.deviceBytes()}
	}
	m.DeviceBytes(r.heldLocked(), gens)
}

// statusView is what Status reports of the registry: read under r.mu, and
// valid only while status's fn runs.
type statusView struct {
	state State
	// held is what every generation holds on the device, summed.
	held uint64
	// primary is the generation Status's single-generation fields
	// describe (primaryLocked; nil when none).
	primary *generation
	// attachFallback is why the latest peer fill of an attach failed
	// (recordAttachFallback; "" once a generation was installed since).
	attachFallback string
	// leases are every lease, by id; gens every generation, oldest first.
	leases []*lease
	gens   []*generation
	// leasesOf lists the leases of g, by id.
	leasesOf func(g *generation) []*lease
}

// status calls fn with the registry's statusView, under r.mu.
func (r *registry) status(fn func(v statusView)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(statusView{state: r.stateLocked(), held: r.heldLocked(), primary: r.primaryLocked(),
		attachFallback: r.lastAttachFallback, leases: r.listLocked(nil), gens: r.gens,
		leasesOf: func(g *generation) []*lease { return r.listLocked([]*generation{g}) }})
}
