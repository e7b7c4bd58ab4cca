package cudabackend

import (
	"context"
	"fmt"

	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/fill"
)

var _ sdk.StatsLoader = (*Backend)(nil)

// Load copies every extent from its file into the allocation through the
// shared fill pipeline (sdk/fill): Config.Readers reader goroutines, each
// on its own OS thread with the device's primary context current, its own
// non-blocking stream and a ring of Config.StagingBuffers pinned staging
// buffers of Config.StagingBytes (on the GPU's NUMA node where sysfs
// names it). A reader preads chunk k into a buffer while the copy engine
// copies earlier chunks out of the others (cuMemcpyHtoDAsync_v2, then an
// event); a buffer is refilled only after its event has completed. Files
// whose pages are not in the page cache are read with O_DIRECT when
// Config.DirectIO is on. Load returns after every copy has completed, so
// the bytes are in place for Read, Digest and Export.
//
// Loads into several allocations of one device run at once and share the
// device's readers. An extent outside the allocation or past its file's
// end, or a file that cannot be opened, is ErrInvalidArgument and nothing
// is copied. Close stops a running Load with ErrUnavailable.
func (b *Backend) Load(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
	_, err := b.LoadWithStats(ctx, id, extents, progress)
	return err
}

// LoadWithStats is Load returning the fill pipeline's counters.
func (b *Backend) LoadWithStats(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) (sdk.LoadStats, error) {
	m, err := b.hold(id)
	if err != nil {
		return sdk.LoadStats{}, err
	}
	defer b.release(m)
	w, err := b.rt.worker(m.ordinal)
	if err != nil {
		return sdk.LoadStats{}, err
	}
	w.loadMu.RLock()
	defer w.loadMu.RUnlock()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-b.rt.closing:
			cancel(errClosed)
		case <-ctx.Done():
		}
	}()
	cfg := b.rt.cfg
	direct := fill.DirectNever
	if cfg.DirectIO {
		direct = fill.DirectAuto
	}
	st, err := fill.Fill(ctx, copier{pool: b.rt.lanePool(w), base: m.ptr}, m.size, extents, progress, fill.Options{
		Readers: cfg.Readers, Buffers: cfg.StagingBuffers, BufferBytes: cfg.StagingBytes, Direct: direct})
	if err != nil {
		return st, fmt.Errorf("load into allocation %d: %w", id, err)
	}
	return st, nil
}

// lanePool returns the device's fill lanes, making the pool on first use:
// as many lanes as readers, staging memory on the GPU's NUMA node when
// sysfs (Config.SysfsRoot) names one.
func (rt *Runtime) lanePool(w *worker) *lanePool {
	w.lanesOnce.Do(func() {
		readers := rt.cfg.Readers
		if readers == 0 {
			readers = fill.DefaultReaders()
		}
		node := -1
		if d, err := rt.device(w.ordinal); err == nil {
			n, ok, err := staging.NUMANode(rt.cfg.SysfsRoot, d.pciBusID)
			switch {
			case err != nil:
				rt.log.Warn("NUMA node of the GPU unknown; staging memory is not placed", "ordinal", w.ordinal, "error", err)
			case ok:
				node = n
			}
		}
		rt.log.Debug("fill lanes", "ordinal", w.ordinal, "readers", readers, "numa_node", node)
		w.lanes = newLanePool(rt.drv, w.ctx, readers, node, rt.log)
	})
	return w.lanes
}
