package rocmbackend

import (
	"context"
	"fmt"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/fill"
)

var _ sdk.StatsLoader = (*Backend)(nil)

// Load copies every extent from its file into the allocation through the
// shared fill pipeline (sdk/fill): Config.Staging.Readers reader
// goroutines, each on its own OS thread with the device current
// (hipSetDevice), its own non-blocking stream and a ring of pinned staging
// buffers (hipHostMalloc). A reader preads chunk k into a buffer while the
// copy engine copies earlier chunks out of the others (hipMemcpyHtoDAsync,
// then an event); a buffer is refilled only after its event completed.
// Load returns after every copy has completed.
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
	c := copier{hip: b.rt.hip, pool: b.rt.lanePool(w), ordinal: m.ordinal, base: m.ptr}
	st, err := fill.Fill(ctx, c, m.size, extents, progress, b.rt.cfg.Staging.FillOptions())
	if err != nil {
		return st, fmt.Errorf("load into allocation %d: %w", id, err)
	}
	return st, nil
}
