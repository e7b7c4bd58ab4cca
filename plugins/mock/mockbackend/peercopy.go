package mockbackend

import (
	"context"
	"fmt"

	"github.com/wcache/wcache/sdk"
)

var _ sdk.PeerCopier = (*Backend)(nil)

// PeerCopy is sdk/mock.Memory's PeerCopy (import the sibling's handle,
// allocate, copy chunk by chunk with a memcpy, unmap the source) with the
// fault knobs of the destination device: EnvFailAllocate refuses the
// allocation and EnvFailPeerCopyAfter fails the copy once that many bytes
// are copied. Either way nothing is left allocated.
func (b *Backend) PeerCopy(ctx context.Context, req sdk.PeerCopyRequest, progress sdk.ProgressFunc) (sdk.PeerCopyResult, error) {
	faults := b.faults(req.Ordinal)
	if faults.FailAllocate {
		return sdk.PeerCopyResult{}, sdk.Errorf(sdk.ErrOutOfMemory, "peer copy on mock device %d: injected by %s", req.Ordinal, EnvFailAllocate)
	}
	var injected error // set by report, on the calling goroutine
	cancel := context.CancelCauseFunc(func(error) {})
	defer func() { cancel(nil) }()
	start := func(ctx context.Context, _ int, progress sdk.ProgressFunc) (context.Context, sdk.ProgressFunc, error) {
		after := faults.FailPeerCopyAfter
		if after == 0 {
			return nil, nil, fmt.Errorf("injected failure after 0 bytes by %s", EnvFailPeerCopyAfter)
		}
		if after < 0 {
			return ctx, progress, nil
		}
		ctx, cancel = context.WithCancelCause(ctx)
		report := func(done, total uint64) {
			if progress != nil {
				progress(done, total)
			}
			if done >= uint64(after) && injected == nil {
				injected = fmt.Errorf("injected failure after %d bytes by %s", done, EnvFailPeerCopyAfter)
				cancel(injected)
			}
		}
		return ctx, report, nil
	}
	res, err := b.mem.PeerCopyWith(ctx, req, progress, start)
	if err != nil && injected != nil {
		// The knob cancelled the copy: the other streams may have failed
		// first with the cancellation; the knob is the cause to report.
		return sdk.PeerCopyResult{}, fmt.Errorf("peer copy: %w (%v)", injected, err)
	}
	if err == nil && injected != nil {
		// The knob fired on the last chunk: nothing was left to stop, but
		// the copy still fails and leaves nothing behind.
		_ = b.mem.Free(context.WithoutCancel(ctx), res.ID)
		return sdk.PeerCopyResult{}, fmt.Errorf("peer copy: %w", injected)
	}
	return res, err
}
