package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/daemon/registry"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/internal/defaults"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
)

// Sources of LoadStats.Source.
const (
	SourceFiles    = "files"
	SourceTakeover = "takeover"
)

// openCheckpoint opens the whole checkpoint of src or the rank's
// pre-sharded files.
func openCheckpoint(src Source) (*safetensors.Checkpoint, error) {
	c := src.Config
	return plan.OpenCheckpoint(src.Model, src.ShardPattern, plan.ShardRanks{
		TPRank: c.TPRank, TPSize: c.TPSize, PPRank: c.PPRank, PPSize: c.PPSize})
}

// loadJob is one checkpoint of Options.sources, opened, planned and with
// its config completed, to be loaded as a generation.
type loadJob struct {
	src Source
	ck  *safetensors.Checkpoint
	pl  *plan.Plan
	g   *generation
}

// prepare opens and plans src and completes its config (Start, before the
// lock): nothing is allocated.
func (d *Daemon) prepare(ctx context.Context, src Source) (*loadJob, error) {
	ck, err := openCheckpoint(src)
	if err != nil {
		return nil, err
	}
	pl, err := plan.Build(ck, d.opts.Plan)
	if err != nil {
		return nil, fmt.Errorf("plan %s: %w", src.Model, err)
	}
	cfg, err := d.completeConfig(ctx, src, ck)
	if err != nil {
		return nil, err
	}
	g := &generation{Model: src.Model, Config: cfg, ConfigProto: cfg.ToProto(), Digest: cfg.Digest(),
		Compare: registry.CompareFor(false, len(ck.Files), cfg.EngineName), Tensors: len(pl.Tensors)}
	for _, f := range ck.Files {
		g.Files = append(g.Files, f.Path)
	}
	return &loadJob{src: src, ck: ck, pl: pl, g: g}, nil
}

// unchanged checks, after the load, that every checkpoint file is still the
// file whose header was read and digested, unchanged (safetensors.File's
// Changed: inode, size, times). The plugin reads the files by path, so a
// file swapped by a rename or written in place during the load would
// otherwise be served under the digest of the original: an engine with the
// original files would attach to other weights. Such a load is refused.
func unchanged(ck *safetensors.Checkpoint) error {
	var errs []error
	for _, f := range ck.Files {
		if err := f.Changed(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("refusing to serve what was loaded: %w", err)
	}
	return nil
}

// contentOf returns the content record of every checkpoint file: the
// digest (sdk/filedigest) from the leaves the fill hashed, completed by
// reading the leaves it did not cover whole (the header's, those at arena
// edges; all of them for a backend that does not hash), and the identity
// the header was read with (unchanged checks it still holds afterwards).
// The digest is in the algorithm of the fill's leaves of that file (the
// plugin's sdk/fill: filedigest.Default; SHA256Tree from a plugin built
// before BLAKE3), Default when the fill sent none or sent leaves of
// several algorithms (then all are hashed here).
//
// A file in cached (digestsInCache) takes the cache's digest: nothing of it
// is read or hashed here.
func (d *Daemon) contentOf(ctx context.Context, ck *safetensors.Checkpoint, leaves []filedigest.FileLeaves, cached map[string]string, stats *LoadStats) ([]cacheconfig.FileContent, error) {
	byPath := map[string][]filedigest.Leaf{}
	algOf := map[string]filedigest.Algorithm{}
	mixed := map[string]bool{}
	for _, fl := range leaves {
		alg := fl.Algorithm
		if alg == "" {
			alg = filedigest.SHA256Tree
		}
		if prev, ok := algOf[fl.Path]; ok && prev != alg {
			mixed[fl.Path] = true
		}
		algOf[fl.Path] = alg
		byPath[fl.Path] = append(byPath[fl.Path], fl.Leaves...)
	}
	out := make([]cacheconfig.FileContent, 0, len(ck.Files))
	var all, fromFill int64
	for _, f := range ck.Files {
		all += filedigest.LeafCount(f.Stamp.Size)
		if digest, ok := cached[f.Path]; ok {
			out = append(out, cacheconfig.FileContent{Name: filepath.Base(f.Path), Path: f.Path, Digest: digest, Identity: f.Stamp})
			continue
		}
		have, alg := byPath[f.Path], algOf[f.Path]
		if mixed[f.Path] || alg == "" {
			have, alg = nil, filedigest.Default
		}
		digest, err := filedigest.Complete(ctx, f.Path, f.Stamp.Size, have, filedigest.Options{Algorithm: alg})
		if err != nil {
			return nil, fmt.Errorf("refusing to serve what was loaded: %w", err)
		}
		fromFill += int64(len(have))
		out = append(out, cacheconfig.FileContent{Name: filepath.Base(f.Path), Path: f.Path, Digest: digest, Identity: f.Stamp})
	}
	slices.SortFunc(out, func(a, b cacheconfig.FileContent) int { return strings.Compare(a.Name, b.Name) })
	stats.DigestLeaves, stats.DigestLeavesFromFill = all, fromFill
	d.log.Info("content digests", "files", len(out), "leaves", all, "leaves_from_fill", fromFill, "files_from_digest_cache", len(cached))
	return out, nil
}

// digestsInCache returns the Default-algorithm digest of every file of ck
// that the digest cache (Options.DigestCache) holds for the file's
// identity, by path, or nil unless it holds one for every file: a load of
// files hashed before (a restart of the daemon, a second daemon of the
// node) then asks the backend for no leaves (sdk.WithoutDigest) and
// records the cache's digests. The identity covers size, mtime and ctime,
// so a file written since it was hashed misses; unchanged checks after the
// load that no file changed while it was read. The cache is the one a peer
// fill already proves its copy against (localcontent.go): private to the
// daemon's user, written only with digests computed from the bytes.
func (d *Daemon) digestsInCache(ck *safetensors.Checkpoint) map[string]string {
	if d.opts.DigestCache == nil || len(ck.Files) == 0 {
		return nil
	}
	out := make(map[string]string, len(ck.Files))
	for _, f := range ck.Files {
		digest, ok := d.opts.DigestCache.Lookup(f.Stamp, filedigest.Default)
		if !ok {
			return nil
		}
		out[f.Path] = digest
	}
	return out
}

// completeConfig fills the fields the daemon knows into src's config and
// validates the result.
func (d *Daemon) completeConfig(ctx context.Context, src Source, ck *safetensors.Checkpoint) (cacheconfig.Config, error) {
	c := src.Config.WithCheckpoint(src.Model, ck)
	defaults.Zero(&c.ProtocolVersion, daemonv1.ProtocolVersion)
	if c.DeviceCapability == "" {
		capability, err := DeviceCapability(ctx, d.backend, d.opts.GPU)
		if err != nil {
			return c, err
		}
		c.DeviceCapability = capability
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("daemon config of %s: %w", src.Model, err)
	}
	return c, nil
}

// fill allocates every arena of the plan into g.Allocs, loads it and
// exports it; g.Load receives the statistics.
func (d *Daemon) fill(ctx context.Context, pl *plan.Plan, g *generation) ([]sdk.Handle, error) {
	startAlloc := time.Now()
	g.ArenaBytes = pl.ArenaBytes()
	reserved, err := d.allocate(ctx, pl, &g.Allocs)
	if err != nil {
		return nil, err
	}
	startLoad := time.Now()
	allocated := startLoad.Sub(startAlloc)
	fillStats, err := d.loadArenas(ctx, pl, g.Allocs)
	if err != nil {
		return nil, err
	}
	g.Load = LoadStats{Bytes: pl.Bytes, AllocatedBytes: reserved, Allocations: len(pl.Allocations),
		Extents: pl.ExtentCount(), Duration: time.Since(startLoad), Fill: fillStats, Allocate: allocated, Source: SourceFiles,
		FilledFrom: FilledFromFiles}
	f := fillStats
	d.log.Info("loaded", "model", g.Model, "bytes", pl.Bytes, "arenas", len(pl.Allocations), "seconds", g.Load.Duration.Seconds(),
		"bytes_per_second", g.Load.BytesPerSecond(), "readers", f.Readers, "chunks", f.Chunks,
		"direct_files", f.DirectFiles, "buffered_files", f.BufferedFiles, "read_s", f.Read.Seconds(),
		"buffer_wait_s", f.BufferWait.Seconds(), "queue_s", f.Queue.Seconds(), "copy_wait_s", f.CopyWait.Seconds())
	if d.opts.Progress != nil {
		d.opts.Progress(pl.Bytes, pl.Bytes)
	}
	startExport := time.Now()
	handles, err := d.export(ctx, g.Allocs)
	if err != nil {
		return nil, err
	}
	g.Load.Export = time.Since(startExport)
	return handles, nil
}

// allocate reserves every arena of pl, appending each id to *ids as soon as
// it exists (so that the caller frees what was reserved when a later one
// fails). It returns the bytes the backend reserved, summed (each arena's
// size as the backend reported it: at least the plan's).
func (d *Daemon) allocate(ctx context.Context, pl *plan.Plan, ids *[]sdk.AllocationID) (uint64, error) {
	var reserved uint64
	for i, a := range pl.Allocations {
		id, got, err := d.backend.Allocate(ctx, d.opts.GPU, a.Bytes)
		if err != nil {
			return reserved, fmt.Errorf("allocate arena %d of %d (%d bytes): %w", i+1, len(pl.Allocations), a.Bytes, err)
		}
		*ids = append(*ids, id)
		reserved += got
		if got < a.Bytes {
			return reserved, fmt.Errorf("allocate arena %d: backend reserved %d bytes, %d requested", i+1, got, a.Bytes)
		}
	}
	return reserved, nil
}

// export exports every allocation, in order.
func (d *Daemon) export(ctx context.Context, ids []sdk.AllocationID) ([]sdk.Handle, error) {
	handles := make([]sdk.Handle, len(ids))
	for i, id := range ids {
		h, err := d.backend.Export(ctx, id)
		if err != nil {
			closeHandleFiles(handles[:i])
			return nil, fmt.Errorf("export arena %d: %w", i+1, err)
		}
		handles[i] = h
	}
	return handles, nil
}

// loadArenas loads every arena at once (one Load per arena, so that the
// backend's fill pipeline has them all in flight together), reports the
// summed progress and returns the summed fill counters. The first error
// cancels the other Loads; it is returned after they all ended.
func (d *Daemon) loadArenas(ctx context.Context, pl *plan.Plan, ids []sdk.AllocationID) (sdk.LoadStats, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		done     = make([]uint64, len(pl.Allocations))
		sum      uint64
		total    sdk.LoadStats
		firstErr error
		wg       sync.WaitGroup
	)
	for i, a := range pl.Allocations {
		progress := func(n, _ uint64) {
			mu.Lock()
			defer mu.Unlock()
			sum += n - done[i]
			done[i] = n
			if d.opts.Progress != nil {
				d.opts.Progress(sum, pl.Bytes)
			}
		}
		wg.Go(func() {
			st, err := sdk.LoadWithStats(ctx, d.backend, ids[i], a.Extents, progress)
			mu.Lock()
			defer mu.Unlock()
			total.Add(st)
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("arena %d of %d: %w", i+1, len(pl.Allocations), err)
				cancel()
			}
		})
	}
	wg.Wait()
	return total, firstErr
}

// freeAll frees every allocation of every generation the daemon holds,
// but those of a publish in progress (its handler frees them).
func (d *Daemon) freeAll() {
	d.reg.ForEachSettled(func(g *generation) {
		d.freeGenAllocs(g)
		if g.Manifest != nil {
			g.Manifest.files.close()
		}
	})
}

// freeGenAllocs frees g's allocations and forgets them: g holds none after
// a failed or aborted fill, or once the daemon stops.
func (d *Daemon) freeGenAllocs(g *generation) {
	d.freeAllocs(g.Allocs)
	g.Allocs = nil
}

// freeAllocs frees allocations, bounded by DefaultFreeTimeout; a failure is
// logged (the memory goes with the plugin process at the latest).
func (d *Daemon) freeAllocs(ids []sdk.AllocationID) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultFreeTimeout)
	defer cancel()
	for _, id := range ids {
		if err := d.backend.Free(ctx, id); err != nil {
			d.log.Warn("freeing an allocation", "allocation", id, "error", err)
		}
	}
}
