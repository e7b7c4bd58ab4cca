package registry

import (
	"time"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/daemon/fill"
	"github.com/wcache/wcache/sdk"
)

// Generation is one set of weights the daemon holds: a model loaded from
// files at start, one a client published, or one taken over from a
// previous daemon. A daemon holds several at once (a target and a draft
// model, co-located models, a new version beside the old one), each with
// its own CacheConfig, arenas, manifest, leases and state
// (StatePublishing, StateServing, StateDraining). Attaches are matched
// against every serving generation by config; an evict names generations.
//
// Every field is guarded by the registry's lock: read and write them in
// the callbacks of its operations, or on a generation no registry holds
// any more (EndEvict's). A generation's identity (ID, Config, Manifest once
// serving) never changes; Allocs are replaced when a new plugin imports
// them (ReplaceAllocs). M is the daemon's manifest type, F its publish
// descriptors' (both opaque here).
type Generation[M, F any] struct {
	// ID is the manifest's generation number: unique within the daemon
	// (and kept across a takeover).
	ID    uint64
	State State
	// drainers counts the evicts draining this generation.
	drainers int
	// Publisher is the client publishing it while StatePublishing.
	Publisher *Publisher[M, F]

	Model       string
	Files       []string
	Config      cacheconfig.Config
	ConfigProto *configv1.CacheConfig
	Digest      string
	// Compare is how an attach's config is compared with config
	// (CompareFor).
	Compare func(daemon, client cacheconfig.Config) []cacheconfig.FieldDiff
	Tensors int
	Load    LoadStats
	Content []cacheconfig.FileContent
	Allocs  []sdk.AllocationID
	// Planned is what the admission counted before allocating (the plan's
	// arena sizes); Load.AllocatedBytes replaces it once allocated.
	Planned  uint64
	Manifest M
	Started  time.Time
	// StopVerify cancels the generation's hub blob verifier (nil without
	// one); removing the generation calls it.
	StopVerify func()
	// ArenaBytes are the plan's arena sizes of a load (nil otherwise), and
	// PeerDigests the arenas' content digests once a peer asked
	// (fill.Source).
	ArenaBytes  []uint64
	PeerDigests fill.ArenaDigests
}

// DeviceBytes is what the generation holds (or has been admitted to hold)
// on the device: its arenas' sizes as the backend reported them, or, while
// they are being allocated, the plan's.
func (g *Generation[M, F]) DeviceBytes() uint64 {
	return max(g.Load.AllocatedBytes, g.Planned)
}

// matches reports whether an attach (or a publish) with c gets g.
func (g *Generation[M, F]) matches(c cacheconfig.Config) bool {
	return len(g.Compare(g.Config, c)) == 0
}

// CompareFor is the comparison of a generation. A publication of a
// checkpoint as stored (wcache publish: source files' content, no engine)
// is matched as a file load (Compare): its clients prove their files
// against that content, which pins the model. An engine's post-processed
// weights (engineName set) and a publication without content are matched
// by ComparePublished (model and stated dtype compared), whether or not
// they carry their source files' content for clients to prove.
func CompareFor(published bool, content int, engineName string) func(daemon, client cacheconfig.Config) []cacheconfig.FieldDiff {
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

// genInfoLocked describes g (r.mu held).
func (r *Registry[M, F]) genInfoLocked(g *Generation[M, F]) GenerationInfo {
	n := 0
	for _, l := range r.leases {
		if l.Gen == g {
			n++
		}
	}
	return GenerationInfo{ID: g.ID, State: g.State, Model: g.Model, Files: g.Files, Config: g.Config,
		ConfigDigest: g.Digest, Tensors: g.Tensors, Load: g.Load, Content: g.Content,
		DeviceBytes: g.DeviceBytes(), Leases: n}
}

// primaryLocked is the generation the single-generation fields of Status,
// Info and the ready file describe: the oldest serving one, else the
// oldest one, else nil.
func (r *Registry[M, F]) primaryLocked() *Generation[M, F] {
	for _, g := range r.gens {
		if g.State == StateServing {
			return g
		}
	}
	if len(r.gens) > 0 {
		return r.gens[0]
	}
	return nil
}

// heldLocked is what every generation holds on the device, summed.
func (r *Registry[M, F]) heldLocked() uint64 {
	var n uint64
	for _, g := range r.gens {
		n += g.DeviceBytes()
	}
	return n
}

// pendingLocked is what was admitted but not yet allocated (and so not
// yet missing from the device's free memory).
func (r *Registry[M, F]) pendingLocked() uint64 {
	var n uint64
	for _, g := range r.gens {
		if g.Planned > g.Load.AllocatedBytes {
			n += g.Planned - g.Load.AllocatedBytes
		}
	}
	return n
}

// addGenLocked appends g. A new generation (id 0) gets an id larger than
// every other one's (the time, or one more); a taken-over one keeps its own.
func (r *Registry[M, F]) addGenLocked(g *Generation[M, F]) {
	if g.ID == 0 {
		g.ID = uint64(time.Now().UnixNano())
		for _, o := range r.gens {
			g.ID = max(g.ID, o.ID+1)
		}
	}
	r.gens = append(r.gens, g)
	r.changedLocked()
}

// removeGenLocked forgets g and stops its hub blob verifier.
func (r *Registry[M, F]) removeGenLocked(g *Generation[M, F]) {
	if g.StopVerify != nil {
		g.StopVerify()
	}
	for i, o := range r.gens {
		if o == g {
			r.gens = append(r.gens[:i:i], r.gens[i+1:]...)
			break
		}
	}
	r.changedLocked()
}

// Generations describes every generation, oldest first.
func (r *Registry[M, F]) Generations() []GenerationInfo {
	out, _ := r.Describe()
	return out
}
