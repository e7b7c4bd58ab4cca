package rocmbackend

import (
	"context"
	"errors"
	"fmt"

	"github.com/wcache/wcache/sdk"
)

// Allocate reserves bytes of device memory with one hipMalloc on the
// device's worker and returns its id and size (exactly bytes). Each
// allocation is exported and imported as one IPC handle, so callers make a
// few large ones (arenas). Zero bytes is ErrInvalidArgument, an unknown
// ordinal ErrNoSuchDevice, a device without room ErrOutOfMemory (the
// backend stays usable).
func (b *Backend) Allocate(ctx context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
	if err := b.live(); err != nil {
		return 0, 0, err
	}
	if _, err := b.rt.device(ordinal); err != nil {
		return 0, 0, err
	}
	if bytes == 0 {
		return 0, 0, sdk.Errorf(sdk.ErrInvalidArgument, "allocate 0 bytes on ROCm device %d", ordinal)
	}
	w, err := b.rt.worker(ordinal)
	if err != nil {
		return 0, 0, err
	}
	m := &deviceMemory{ordinal: ordinal, size: bytes}
	err = w.thread.Do(ctx, func() error {
		var err error
		m.ptr, err = b.rt.hip.Malloc(bytes)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("allocate %d bytes on ROCm device %d: %w", bytes, ordinal, err)
	}
	if err := b.rt.register(m); err != nil {
		return 0, 0, errors.Join(fmt.Errorf("allocate on ROCm device %d: %w", ordinal, err), m.release(context.Background(), b.rt.hip, w))
	}
	id, err := b.ids.Add(m)
	if err != nil {
		b.release(m)
		return 0, 0, err
	}
	return id, bytes, nil
}
