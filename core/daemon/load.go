package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/internal/version"
	"github.com/wcache/wcache/sdk"
)

// LoadStats measure the load.
type LoadStats struct {
	// Bytes is what was read from files; AllocatedBytes what was reserved
	// on the device (padding included).
	Bytes          uint64
	AllocatedBytes uint64
	Allocations    int
	Extents        int
	// Duration is the time of the Load calls (allocation and export
	// excluded): the fill rate is Bytes / Duration.
	Duration time.Duration
}

// BytesPerSecond is the fill rate of the load.
func (s LoadStats) BytesPerSecond() float64 {
	if s.Duration <= 0 {
		return 0
	}
	return float64(s.Bytes) / s.Duration.Seconds()
}

// openCheckpoint opens the whole checkpoint or the rank's pre-sharded files.
func (d *Daemon) openCheckpoint() (*safetensors.Checkpoint, error) {
	var ck *safetensors.Checkpoint
	var err error
	if d.opts.ShardPattern == "" {
		ck, err = safetensors.OpenCheckpoint(d.opts.Model)
	} else {
		var files []string
		c := d.opts.Config
		files, err = plan.ShardFiles(d.opts.Model, d.opts.ShardPattern, plan.ShardRanks{
			TPRank: c.TPRank, TPSize: c.TPSize, PPRank: c.PPRank, PPSize: c.PPSize})
		if err == nil {
			ck, err = safetensors.OpenFiles(files)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", d.opts.Model, err)
	}
	d.info.Model = d.opts.Model
	for _, f := range ck.Files {
		d.info.Files = append(d.info.Files, f.Path)
	}
	return ck, nil
}

// completeConfig fills the fields the daemon knows and validates the result.
func (d *Daemon) completeConfig(ctx context.Context, ck *safetensors.Checkpoint) error {
	c := d.opts.Config
	c.CheckpointDigest = cacheconfig.CheckpointDigest(ck)
	if c.Model == "" {
		c.Model = filepath.Clean(d.opts.Model)
	}
	if c.ProtocolVersion == 0 {
		c.ProtocolVersion = version.ProtocolVersion
	}
	if c.DeviceCapability == "" {
		devs, err := d.backend.Devices(ctx)
		if err != nil {
			return fmt.Errorf("device capability: %w", err)
		}
		for _, dev := range devs {
			if dev.Ordinal == d.opts.GPU {
				c.DeviceCapability = dev.Capability
			}
		}
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("daemon config: %w", err)
	}
	d.config = c
	d.configProto = c.ToProto()
	d.info.Config = c
	d.info.ConfigDigest = c.Digest()
	return nil
}

// fill allocates every arena of the plan, loads it and exports it.
func (d *Daemon) fill(ctx context.Context, pl *plan.Plan) ([]sdk.Handle, error) {
	if err := d.allocate(ctx, pl, &d.allocs); err != nil {
		return nil, err
	}
	var base uint64
	startLoad := time.Now()
	for i, a := range pl.Allocations {
		var progress sdk.ProgressFunc
		if d.opts.Progress != nil {
			offset := base
			progress = func(done, _ uint64) { d.opts.Progress(offset+done, pl.Bytes) }
		}
		if err := d.backend.Load(ctx, d.allocs[i], a.Extents, progress); err != nil {
			return nil, fmt.Errorf("arena %d of %d: %w", i+1, len(pl.Allocations), err)
		}
		for _, e := range a.Extents {
			base += e.Length
		}
	}
	d.info.Load = LoadStats{Bytes: pl.Bytes, AllocatedBytes: pl.AllocatedBytes(), Allocations: len(pl.Allocations),
		Extents: pl.ExtentCount(), Duration: time.Since(startLoad)}
	if d.opts.Progress != nil {
		d.opts.Progress(pl.Bytes, pl.Bytes)
	}
	return d.export(ctx, d.allocs)
}

// allocate reserves every arena of pl, appending each id to *ids as soon as
// it exists (so that the caller frees what was reserved when a later one
// fails).
func (d *Daemon) allocate(ctx context.Context, pl *plan.Plan, ids *[]sdk.AllocationID) error {
	for i, a := range pl.Allocations {
		id, got, err := d.backend.Allocate(ctx, d.opts.GPU, a.Bytes)
		if err != nil {
			return fmt.Errorf("allocate arena %d of %d (%d bytes): %w", i+1, len(pl.Allocations), a.Bytes, err)
		}
		*ids = append(*ids, id)
		if got < a.Bytes {
			return fmt.Errorf("allocate arena %d: backend reserved %d bytes, %d requested", i+1, got, a.Bytes)
		}
	}
	return nil
}

// export exports every allocation, in order.
func (d *Daemon) export(ctx context.Context, ids []sdk.AllocationID) ([]sdk.Handle, error) {
	handles := make([]sdk.Handle, len(ids))
	for i, id := range ids {
		h, err := d.backend.Export(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("export arena %d: %w", i+1, err)
		}
		handles[i] = h
	}
	return handles, nil
}

// freeAll frees every allocation the daemon holds.
func (d *Daemon) freeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.freeAllocs(d.allocs)
	d.allocs = nil
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
