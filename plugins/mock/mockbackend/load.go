package mockbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/wcache/wcache/sdk"
)

// Load is sdk/mock.Memory's Load (the shared fill pipeline writing the
// allocation's file or memfd with pwrite, 1 MiB chunks) with the load
// fault knobs of the allocation's device: EnvLoadDelay waits before the
// copy (ending early with the call or with Close), EnvFailLoadAfter fails
// and EnvCrashLoadAfter ends the process once that many bytes are copied.
// Progress is reported from the calling goroutine. Cancelling ctx (or
// Close) stops it.
func (b *Backend) Load(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
	_, err := b.LoadWithStats(ctx, id, extents, progress)
	return err
}

// LoadWithStats is Load returning the fill pipeline's counters.
func (b *Backend) LoadWithStats(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) (sdk.LoadStats, error) {
	var injected error // set by report, on the calling goroutine
	cancel := context.CancelCauseFunc(func(error) {})
	defer func() { cancel(nil) }()
	start := func(ctx context.Context, ordinal int, progress sdk.ProgressFunc) (context.Context, sdk.ProgressFunc, error) {
		faults := b.faults(ordinal)
		if d := faults.LoadDelay; d > 0 {
			b.log.Debug("delaying load", "delay", d, "knob", EnvLoadDelay)
			timer := time.NewTimer(d)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
				return nil, nil, fmt.Errorf("load into allocation %d: %w", id, ctx.Err())
			case <-b.closing:
				return nil, nil, sdk.Errorf(sdk.ErrUnavailable, "mock backend is shutting down")
			}
		}
		if faults.FailLoadAfter == 0 {
			return nil, nil, fmt.Errorf("load into allocation %d: injected failure after 0 bytes by %s", id, EnvFailLoadAfter)
		}
		if faults.CrashLoadAfter == 0 {
			b.crash(id, 0)
		}
		ctx, cancel = context.WithCancelCause(ctx)
		report := func(done, total uint64) {
			if progress != nil {
				progress(done, total)
			}
			if faults.CrashLoadAfter > 0 && done >= uint64(faults.CrashLoadAfter) {
				b.crash(id, done)
			}
			if faults.FailLoadAfter > 0 && done >= uint64(faults.FailLoadAfter) && injected == nil {
				injected = fmt.Errorf("injected failure after %d bytes by %s", done, EnvFailLoadAfter)
				cancel(injected)
			}
		}
		return ctx, report, nil
	}
	st, err := b.mem.LoadWith(ctx, id, extents, progress, start)
	if err == nil && injected != nil {
		// The knob fired on the last chunk: the fill had nothing left
		// to stop, but the load still fails.
		err = fmt.Errorf("load into allocation %d: %w", id, injected)
	}
	return st, err
}

// crash simulates a backend crash for EnvCrashLoadAfter: it logs, then ends
// the process with CrashExitCode without releasing anything.
func (b *Backend) crash(id sdk.AllocationID, done uint64) {
	b.log.Error("injected crash during load", "allocation", id, "bytes_done", done, "knob", EnvCrashLoadAfter)
	b.exit(CrashExitCode)
}
