package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
)

// This file is the serving side of cross-node peer fill: the daemon's
// generations as a peer.Source. A peer asks by weights identity
// (cacheconfig.WeightsIdentity: the checkpoint digest for a file load, the
// config less the fields that do not change the bytes for a publication)
// and gets the serving generation of that identity, its arenas' sizes and
// content digests, then reads ranges of them.

// peerDigests are a generation's per-arena content digests, computed once
// (through the backend's Digest: only the sums cross the plugin boundary)
// the first time a peer asks, or when the endpoint starts.
type peerDigests struct {
	mu      sync.Mutex
	digests []string
}

// peerSource is the daemon's generations as a peer.Source.
type peerSource struct{ d *Daemon }

var _ peer.Source = peerSource{}

// weightsIdentity is g's weights identity: a publication's by the published
// rule, any other (a file load, one taken over) by the files' rule. ""
// when g has none (a file load without a checkpoint digest).
func weightsIdentity(g *generation) string {
	kind := cacheconfig.WeightsFromFiles
	if g.manifest != nil && g.manifest.published {
		kind = cacheconfig.WeightsPublished
	}
	id, err := cacheconfig.WeightsIdentity(g.config, kind)
	if err != nil {
		return ""
	}
	return id
}

// Open returns the serving generation of identity, held until Release: the
// hold duplicates the arenas' descriptors (memfd, cuda-vmm-fd), so memory
// an evict frees meanwhile stays readable until Release, as a client's
// mapping keeps it; a read after the generation stopped serving fails with
// peer.ErrGenerationChanged. ErrNotHeld when no serving generation has the
// identity.
func (s peerSource) Open(ctx context.Context, identity string) (peer.Generation, error) {
	d := s.d
	d.reg.mu.Lock()
	var g *generation
	for _, o := range d.reg.gens {
		if o.state == StateServing && o.manifest != nil && weightsIdentity(o) == identity {
			g = o
			break
		}
	}
	if g == nil {
		d.reg.mu.Unlock()
		return nil, fmt.Errorf("identity %s: %w", identity, peer.ErrNotHeld)
	}
	allocs := slices.Clone(g.allocs)
	sizes := g.arenaSizes()
	d.reg.mu.Unlock()
	files, err := g.manifest.files.descriptors(false)
	if err != nil {
		return nil, fmt.Errorf("generation %d: %w", g.id, peer.ErrGenerationChanged)
	}
	byArena := make([]*os.File, len(sizes))
	for _, f := range files {
		if int(f.Handle) < len(byArena) {
			byArena[f.Handle] = f.File
		}
	}
	digests, err := d.arenaDigests(ctx, g, allocs, sizes, byArena)
	if err != nil {
		closeFiles(byArena)
		return nil, err
	}
	arenas := make([]peer.Arena, len(sizes))
	for i := range sizes {
		arenas[i] = peer.Arena{Size: sizes[i], Digest: digests[i]}
	}
	return &heldGeneration{d: d, g: g, allocs: allocs, files: byArena, arenas: arenas}, nil
}

// arenaSizes are the sizes a peer is offered: the plan's arena sizes for a
// load (what a peer's own plan of the same files allocates), the exported
// handles' otherwise. registry.mu held.
func (g *generation) arenaSizes() []uint64 {
	if g.arenaBytes != nil {
		return slices.Clone(g.arenaBytes)
	}
	out := make([]uint64, len(g.manifest.handles))
	for i, h := range g.manifest.handles {
		out[i] = h.GetSize()
	}
	return out
}

// arenaDigests returns g's per-arena content digests, computing them the
// first time: from the arena's memfd (files[i], nil for an arena without
// one) in filedigest.Default (BLAKE3, read by the daemon), else through the
// backend (peer.ArenaDigest: SHA-256 of each leaf in the plugin). The
// bytes never change while g is held (sealed, or device memory no client
// may write), so they are computed once.
func (d *Daemon) arenaDigests(ctx context.Context, g *generation, allocs []sdk.AllocationID, sizes []uint64, files []*os.File) ([]string, error) {
	g.peerDigests.mu.Lock()
	defer g.peerDigests.mu.Unlock()
	if g.peerDigests.digests != nil {
		return g.peerDigests.digests, nil
	}
	if len(allocs) != len(sizes) {
		return nil, fmt.Errorf("generation %d: %d allocations for %d arenas: %w", g.id, len(allocs), len(sizes), peer.ErrGenerationChanged)
	}
	out := make([]string, len(sizes))
	for i, id := range allocs {
		var dg string
		var err error
		if i < len(files) && files[i] != nil {
			dg, err = peer.ArenaDigestFrom(ctx, files[i], sizes[i], filedigest.Default, 0)
		} else {
			dg, err = peer.ArenaDigest(ctx, d.backend, id, sizes[i])
		}
		if err != nil {
			if !d.reg.serves(g) {
				return nil, fmt.Errorf("generation %d: %w", g.id, peer.ErrGenerationChanged)
			}
			return nil, fmt.Errorf("generation %d: arena %d: %w", g.id, i, err)
		}
		out[i] = dg
	}
	g.peerDigests.digests = out
	d.log.Info("arena content digests for peers", "generation", g.id, "arenas", len(out))
	return out, nil
}

// heldGeneration is one peer request's hold of a generation.
type heldGeneration struct {
	d      *Daemon
	g      *generation
	allocs []sdk.AllocationID
	// files are duplicates of the descriptor handles (nil for an arena
	// without one: read through the backend).
	files  []*os.File
	arenas []peer.Arena
	once   sync.Once
}

func (h *heldGeneration) ID() string           { return strconv.FormatUint(h.g.id, 10) }
func (h *heldGeneration) Arenas() []peer.Arena { return h.arenas }

// ReadAt reads arena's bytes at off: with pread from the arena's
// descriptor (mock memfd), else through the backend's Read in pieces of at
// most sdk.MaxReadBytes (a device arena: the bytes cross the plugin
// boundary, one bounded gRPC message each). A generation that no longer
// serves is peer.ErrGenerationChanged.
func (h *heldGeneration) ReadAt(ctx context.Context, arena int, p []byte, off uint64) error {
	if !h.d.reg.serves(h.g) {
		return fmt.Errorf("generation %d: %w", h.g.id, peer.ErrGenerationChanged)
	}
	if f := h.files[arena]; f != nil {
		if _, err := f.ReadAt(p, int64(off)); err != nil {
			return fmt.Errorf("arena %d at %d: %w", arena, off, err)
		}
		return nil
	}
	for len(p) > 0 {
		n := min(uint64(len(p)), sdk.MaxReadBytes)
		b, err := h.d.backend.Read(ctx, h.allocs[arena], off, n)
		if err != nil {
			if errors.Is(err, sdk.ErrNoSuchAllocation) || !h.d.reg.serves(h.g) {
				return fmt.Errorf("generation %d: %w", h.g.id, peer.ErrGenerationChanged)
			}
			return fmt.Errorf("arena %d at %d: %w", arena, off, err)
		}
		if uint64(len(b)) != n {
			return fmt.Errorf("arena %d at %d: backend read %d of %d bytes", arena, off, len(b), n)
		}
		copy(p, b)
		p, off = p[n:], off+n
	}
	return nil
}

// Release closes the hold's descriptors.
func (h *heldGeneration) Release() { h.once.Do(func() { closeFiles(h.files) }) }

func closeFiles(files []*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}
