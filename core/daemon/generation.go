package daemon

import (
	"time"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/daemon/fill"
	"github.com/wcache/wcache/sdk"
)

// generation is one set of weights the daemon holds: a model loaded from
// files at start, one a client published, or one taken over from a
// previous daemon. A daemon holds several at once (a target and a draft
// model, co-located models, a new version beside the old one), each with
// its own CacheConfig, arenas, manifest, leases and state
// (StatePublishing, StateServing, StateDraining). Attaches are matched
// against every serving generation by config; an evict names generations.
//
// Every field is guarded by registry.mu. A generation's identity (id,
// config, manifest once serving) never changes; allocs are replaced when a
// new plugin imports them (restart.go).
type generation struct {
	// id is the manifest's generation number: unique within the daemon
	// (and kept across a takeover).
	id    uint64
	state State
	// drainers counts the evicts draining this generation.
	drainers int
	// publisher is the client publishing it while StatePublishing.
	publisher *publisher

	model       string
	files       []string
	config      cacheconfig.Config
	configProto *configv1.CacheConfig
	digest      string
	// compare is how an attach's config is compared with config
	// (compareFor).
	compare func(daemon, client cacheconfig.Config) []cacheconfig.FieldDiff
	tensors int
	load    LoadStats
	content []cacheconfig.FileContent
	allocs  []sdk.AllocationID
	// planned is what the admission counted before allocating (the plan's
	// arena sizes); load.AllocatedBytes replaces it once allocated.
	planned  uint64
	manifest *manifest
	started  time.Time
	// stopVerify cancels the generation's hub blob verifier (hubblob.go;
	// nil without one); removeGenLocked calls it.
	stopVerify func()
	// arenaBytes are the plan's arena sizes of a load (nil otherwise), and
	// peerDigests the arenas' content digests once a peer asked
	// (fill.Source).
	arenaBytes  []uint64
	peerDigests fill.ArenaDigests
}

// deviceBytes is what the generation holds (or has been admitted to hold)
// on the device: its arenas' sizes as the backend reported them, or, while
// they are being allocated, the plan's.
func (g *generation) deviceBytes() uint64 {
	return max(g.load.AllocatedBytes, g.planned)
}

// matches reports whether an attach (or a publish) with c gets g.
func (g *generation) matches(c cacheconfig.Config) bool {
	return len(g.compare(g.config, c)) == 0
}

// compareFor is the comparison of a generation. A publication of a
// checkpoint as stored (wcache publish: source files' content, no engine)
// is matched as a file load (Compare): its clients prove their files
// against that content, which pins the model. An engine's post-processed
// weights (engineName set) and a publication without content are matched
// by ComparePublished (model and stated dtype compared), whether or not
// they carry their source files' content for clients to prove.
func compareFor(published bool, content int, engineName string) func(daemon, client cacheconfig.Config) []cacheconfig.FieldDiff {
	if published && (content == 0 || engineName != "") {
		return cacheconfig.ComparePublished
	}
	return cacheconfig.Compare
}

// GenerationInfo describes one generation the daemon holds.
type GenerationInfo struct {
	ID           uint64
	State        State
	Model        string
	Files        []string
	Config       cacheconfig.Config
	ConfigDigest string
	Tensors      int
	Load         LoadStats
	Content      []cacheconfig.FileContent
	// DeviceBytes is the arenas' sizes as the backend reported them.
	DeviceBytes uint64
	Leases      int
}

// genInfoLocked describes g (registry.mu held).
func (r *registry) genInfoLocked(g *generation) GenerationInfo {
	n := 0
	for _, l := range r.leases {
		if l.gen == g {
			n++
		}
	}
	return GenerationInfo{ID: g.id, State: g.state, Model: g.model, Files: g.files, Config: g.config,
		ConfigDigest: g.digest, Tensors: g.tensors, Load: g.load, Content: g.content,
		DeviceBytes: g.deviceBytes(), Leases: n}
}

// primaryLocked is the generation the single-generation fields of Status,
// Info and the ready file describe: the oldest serving one, else the
// oldest one, else nil.
func (r *registry) primaryLocked() *generation {
	for _, g := range r.gens {
		if g.state == StateServing {
			return g
		}
	}
	if len(r.gens) > 0 {
		return r.gens[0]
	}
	return nil
}

// heldLocked is what every generation holds on the device, summed.
func (r *registry) heldLocked() uint64 {
	var n uint64
	for _, g := range r.gens {
		n += g.deviceBytes()
	}
	return n
}

// pendingLocked is what was admitted but not yet allocated (and so not
// yet missing from the device's free memory).
func (r *registry) pendingLocked() uint64 {
	var n uint64
	for _, g := range r.gens {
		if g.planned > g.load.AllocatedBytes {
			n += g.planned - g.load.AllocatedBytes
		}
	}
	return n
}

// addGenLocked appends g. A new generation (id 0) gets an id larger than
// every other one's (the time, or one more); a taken-over one keeps its own.
func (r *registry) addGenLocked(g *generation) {
	if g.id == 0 {
		g.id = uint64(time.Now().UnixNano())
		for _, o := range r.gens {
			g.id = max(g.id, o.id+1)
		}
	}
	r.gens = append(r.gens, g)
	r.changedLocked()
}

// removeGenLocked forgets g and stops its hub blob verifier.
func (r *registry) removeGenLocked(g *generation) {
	if g.stopVerify != nil {
		g.stopVerify()
	}
	for i, o := range r.gens {
		if o == g {
			r.gens = append(r.gens[:i:i], r.gens[i+1:]...)
			break
		}
	}
	r.changedLocked()
}

// generations describes every generation, oldest first.
func (r *registry) generations() []GenerationInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]GenerationInfo, len(r.gens))
	for i, g := range r.gens {
		out[i] = r.genInfoLocked(g)
	}
	return out
}

// Generations describes every generation the daemon holds, oldest first.
func (d *Daemon) Generations() []GenerationInfo { return d.reg.generations() }

// HeldBytes is the device memory the daemon holds: every generation's
// arenas (as the backend reported their sizes), a publish in progress
// included.
func (d *Daemon) HeldBytes() uint64 { return d.reg.held() }
