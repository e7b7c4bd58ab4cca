package rocmbackend

import (
	"context"
	"fmt"

	"github.com/wcache/wcache/plugins/internal/readback"
	"github.com/wcache/wcache/plugins/rocm/hip"
	"github.com/wcache/wcache/sdk"
)

// Read copies [offset, offset+length) of the allocation or mapping to the
// host (hipMemcpyDtoH). length above sdk.MaxReadBytes or a range past the
// end is ErrInvalidArgument.
func (b *Backend) Read(ctx context.Context, id sdk.AllocationID, offset, length uint64) ([]byte, error) {
	m, err := b.hold(id)
	if err != nil {
		return nil, err
	}
	defer b.release(m)
	if err := readback.CheckRead(offset, length, m.size); err != nil {
		return nil, err
	}
	w, err := b.rt.worker(m.ordinal)
	if err != nil {
		return nil, err
	}
	out := make([]byte, length)
	if err := w.thread.Do(ctx, func() error { return b.rt.hip.MemcpyDtoH(out, m.ptr+hip.DevicePtr(offset)) }); err != nil {
		return nil, fmt.Errorf("read allocation %d [%d, +%d): %w", id, offset, length, err)
	}
	return out, nil
}

// Digest returns the SHA-256 of each range, copying to the host in chunks
// of up to 8 MiB, the next chunk copying while the previous one is hashed.
// Any range past the end is ErrInvalidArgument, checked before anything is
// copied.
func (b *Backend) Digest(ctx context.Context, id sdk.AllocationID, ranges []sdk.Range) ([][32]byte, error) {
	m, err := b.hold(id)
	if err != nil {
		return nil, err
	}
	defer b.release(m)
	largest, err := readback.CheckRanges(ranges, m.size)
	if err != nil {
		return nil, err
	}
	w, err := b.rt.worker(m.ordinal)
	if err != nil {
		return nil, err
	}
	out, err := readback.Digest(ctx, ranges, largest, func(buf []byte, off uint64) <-chan error {
		src := m.ptr + hip.DevicePtr(off)
		return w.thread.Submit(ctx, func() error { return b.rt.hip.MemcpyDtoH(buf, src) })
	})
	if err != nil {
		return nil, fmt.Errorf("digest allocation %d: %w", id, err)
	}
	return out, nil
}
