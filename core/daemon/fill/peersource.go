package fill

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
)

// This file is the serving side of cross-node peer fill: the daemon's
// generations (Generations) as a peer.Source. A peer asks by weights identity
// (cacheconfig.WeightsIdentity: the checkpoint digest for a file load, the
// config less the fields that do not change the bytes for a publication)
// and gets the serving generation of that identity, its arenas' sizes and
// content digests, then reads ranges of them.

// ArenaDigests are a generation's per-arena content digests, computed once
// (through the backend's Digest: only the sums cross the plugin boundary)
// the first time a peer asks, or when the endpoint starts. The generation
// keeps them (its zero value: none yet).
type ArenaDigests struct {
	mu      sync.Mutex
	digests []string
}

// Generations are what the peer endpoint serves: the daemon's generations.
type Generations interface {
	// Lend returns the serving generation of weights identity
	// (cacheconfig.WeightsIdentity), for one peer request: an error
	// wrapping peer.ErrNotHeld when none serves it, peer.ErrGenerationChanged
	// when its descriptors are gone.
	Lend(identity string) (Lent, error)
}

// Lent is one serving generation lent to a peer request.
type Lent struct {
	// ID is the generation's id.
	ID uint64
	// Allocs are its arenas' allocations, Sizes the sizes a peer is
	// offered (a load's plan arena sizes: what a peer's own plan of the
	// same files allocates; the handles' sizes otherwise).
	Allocs []sdk.AllocationID
	Sizes  []uint64
	// Files are duplicates of the arenas' descriptors, by arena (nil for
	// an arena without one: read through the backend); the hold closes
	// them.
	Files []*os.File
	// Digests is the generation's digest cache.
	Digests *ArenaDigests
	// Serves reports whether the generation still serves.
	Serves func() bool
}

// Source is the daemon's generations as a peer.Source.
type Source struct {
	Gens   Generations
	Daemon Daemon
	Log    hclog.Logger
}

var _ peer.Source = Source{}

// Open returns the serving generation of identity, held until Release: the
// hold duplicates the arenas' descriptors (memfd, cuda-vmm-fd), so memory
// an evict frees meanwhile stays readable until Release, as a client's
// mapping keeps it; a read after the generation stopped serving fails with
// peer.ErrGenerationChanged. ErrNotHeld when no serving generation has the
// identity.
func (s Source) Open(ctx context.Context, identity string) (peer.Generation, error) {
	l, err := s.Gens.Lend(identity)
	if err != nil {
		return nil, err
	}
	digests, err := s.arenaDigests(ctx, l)
	if err != nil {
		closeFiles(l.Files)
		return nil, err
	}
	arenas := make([]peer.Arena, len(l.Sizes))
	for i := range l.Sizes {
		arenas[i] = peer.Arena{Size: l.Sizes[i], Digest: digests[i]}
	}
	return &heldGeneration{d: s.Daemon, l: l, arenas: arenas}, nil
}

// arenaDigests returns l's per-arena content digests, computing them the
// first time: from the arena's memfd (l.Files[i], nil for an arena
// without one) in filedigest.Default (BLAKE3, read by the daemon), else
// through the backend (peer.ArenaDigest: SHA-256 of each leaf in the
// plugin). The bytes never change while the generation is held (sealed,
// or device memory no client may write), so they are computed once.
func (s Source) arenaDigests(ctx context.Context, l Lent) ([]string, error) {
	c := l.Digests
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.digests != nil {
		return c.digests, nil
	}
	if len(l.Allocs) != len(l.Sizes) {
		return nil, fmt.Errorf("generation %d: %d allocations for %d arenas: %w", l.ID, len(l.Allocs), len(l.Sizes), peer.ErrGenerationChanged)
	}
	out := make([]string, len(l.Sizes))
	for i, id := range l.Allocs {
		var dg string
		var err error
		if i < len(l.Files) && l.Files[i] != nil {
			dg, err = peer.ArenaDigestFrom(ctx, l.Files[i], l.Sizes[i], filedigest.Default, 0)
		} else {
			dg, err = peer.ArenaDigest(ctx, s.Daemon.Backend(), id, l.Sizes[i])
		}
		if err != nil {
			if !l.Serves() {
				return nil, fmt.Errorf("generation %d: %w", l.ID, peer.ErrGenerationChanged)
			}
			return nil, fmt.Errorf("generation %d: arena %d: %w", l.ID, i, err)
		}
		out[i] = dg
	}
	c.digests = out
	s.Log.Info("arena content digests for peers", "generation", l.ID, "arenas", len(out))
	return out, nil
}

// heldGeneration is one peer request's hold of a generation.
type heldGeneration struct {
	d      Daemon
	l      Lent
	arenas []peer.Arena
	once   sync.Once
}

func (h *heldGeneration) ID() string           { return strconv.FormatUint(h.l.ID, 10) }
func (h *heldGeneration) Arenas() []peer.Arena { return h.arenas }

// ReadAt reads arena's bytes at off: with pread from the arena's
// descriptor (mock memfd), else through the backend's Read in pieces of at
// most sdk.MaxReadBytes (a device arena: the bytes cross the plugin
// boundary, one bounded gRPC message each). A generation that no longer
// serves is peer.ErrGenerationChanged.
func (h *heldGeneration) ReadAt(ctx context.Context, arena int, p []byte, off uint64) error {
	if !h.l.Serves() {
		return fmt.Errorf("generation %d: %w", h.l.ID, peer.ErrGenerationChanged)
	}
	if f := h.l.Files[arena]; f != nil {
		if _, err := f.ReadAt(p, int64(off)); err != nil {
			return fmt.Errorf("arena %d at %d: %w", arena, off, err)
		}
		return nil
	}
	for len(p) > 0 {
		n := min(uint64(len(p)), sdk.MaxReadBytes)
		b, err := h.d.Backend().Read(ctx, h.l.Allocs[arena], off, n)
		if err != nil {
			if errors.Is(err, sdk.ErrNoSuchAllocation) || !h.l.Serves() {
				return fmt.Errorf("generation %d: %w", h.l.ID, peer.ErrGenerationChanged)
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
func (h *heldGeneration) Release() { h.once.Do(func() { closeFiles(h.l.Files) }) }

// closeFiles closes files (nil entries skipped).
func closeFiles(files []*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}
