package cudabackend

import (
	"context"
	"errors"
	"fmt"

	"github.com/wcache/wcache/sdk"
)

// Allocate reserves bytes of device memory with one cuMemAlloc_v2 call, in
// the device's primary context, and returns its id and size (exactly
// bytes). Callers are expected to make a few large allocations (an arena),
// since each is exported and imported as one IPC handle. Zero bytes is
// ErrInvalidArgument, an unknown ordinal ErrNoSuchDevice, a device without
// room ErrOutOfMemory (the backend stays usable).
func (b *Backend) Allocate(ctx context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
	if err := b.live(); err != nil {
		return 0, 0, err
	}
	if _, err := b.rt.device(ordinal); err != nil {
		return 0, 0, err
	}
	if bytes == 0 {
		return 0, 0, sdk.Errorf(sdk.ErrInvalidArgument, "allocate 0 bytes on CUDA device %d", ordinal)
	}
	w, err := b.rt.worker(ordinal)
	if err != nil {
		return 0, 0, err
	}
	m := &deviceMemory{ordinal: ordinal, size: bytes}
	err = w.do(ctx, func() error {
		var err error
		m.ptr, err = b.rt.drv.MemAlloc(bytes)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("allocate %d bytes on CUDA device %d: %w", bytes, ordinal, err)
	}
	if err := b.rt.register(m); err != nil {
		return 0, 0, errors.Join(fmt.Errorf("allocate on CUDA device %d: %w", ordinal, err), m.release(context.Background(), b.rt.drv, w))
	}
	id, err := b.add(m)
	if err != nil {
		b.release(m)
		return 0, 0, err
	}
	return id, bytes, nil
}

// Free drops the id. The allocation is freed (cuMemFree_v2), or the IPC
// mapping closed (cuIpcCloseMemHandle), when no other id and no running
// operation references it any more. Freeing an unknown or already freed
// id is ErrNoSuchAllocation.
func (b *Backend) Free(ctx context.Context, id sdk.AllocationID) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return errClosed
	}
	m, ok := b.allocs[id]
	delete(b.allocs, id)
	b.mu.Unlock()
	if !ok {
		return sdk.Errorf(sdk.ErrNoSuchAllocation, "free allocation %d", id)
	}
	if err := b.rt.drop(m); err != nil {
		return fmt.Errorf("free allocation %d: %w", id, err)
	}
	return nil
}
