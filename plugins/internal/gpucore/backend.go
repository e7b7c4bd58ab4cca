package gpucore

import (
	"context"
	"errors"
	"fmt"

	"github.com/wcache/wcache/plugins/internal/idtable"
	"github.com/wcache/wcache/plugins/internal/readback"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/fill"
)

// Backend is the memory half of an sdk.Backend: a table of allocation ids
// over a Runtime's device memory. A vendor backend embeds it and adds
// Info, Devices and DeviceUUID. It is safe for concurrent use.
type Backend struct {
	rt  *Runtime
	ids *idtable.Table[*memory]
}

// NewBackend returns a Backend over rt with its own allocation ids.
func (rt *Runtime) NewBackend() *Backend {
	return &Backend{rt: rt, ids: idtable.New[*memory](rt.errClosed)}
}

// Live fails with ErrUnavailable once the Backend or its Runtime is closed.
func (b *Backend) Live() error {
	if b.ids.Closed() || b.rt.IsClosed() {
		return b.rt.errClosed
	}
	return nil
}

// Close frees every allocation and mapping the Backend's ids hold (memory
// another Backend still references stays until that one lets go). It does
// not close the Runtime. After a fatal error nothing is freed (the process
// exit does it). Close is idempotent.
func (b *Backend) Close() error {
	mems, first := b.ids.Close()
	if !first || b.rt.drv.Fatal() != nil {
		return nil
	}
	var errs []error
	for _, m := range mems {
		errs = append(errs, b.rt.drop(m))
	}
	return errors.Join(errs...)
}

// hold looks up id and takes a reference for the duration of an
// operation; the caller must call b.release(m) when done. A concurrent
// Free then only removes the id, and the memory stays until the operation
// ends.
func (b *Backend) hold(id sdk.AllocationID) (*memory, error) { return b.ids.Hold(id, b.rt.acquire) }

// holdOnWorker is hold plus the worker of the allocation's device
// (started if need be); on success the caller releases m.
func (b *Backend) holdOnWorker(id sdk.AllocationID) (*memory, *Worker, error) {
	m, err := b.hold(id)
	if err != nil {
		return nil, nil, err
	}
	w, err := b.rt.Worker(m.ordinal)
	if err != nil {
		b.release(m)
		return nil, nil, err
	}
	return m, w, nil
}

// release drops an operation's reference, logging a failure to free.
func (b *Backend) release(m *memory) {
	if err := b.rt.drop(m); err != nil {
		b.rt.log.Error("release device memory", "error", err)
	}
}

// Allocate reserves bytes of device memory with one allocation on the
// device's worker (Driver.Malloc, or FDDriver.CreateFD when the handles
// are descriptors) and returns its id and size (exactly bytes). Each
// allocation is exported and imported as one IPC handle, so callers make
// a few large ones (arenas). Zero bytes is ErrInvalidArgument, an unknown
// ordinal ErrNoSuchDevice, a device without room ErrOutOfMemory (the
// backend stays usable).
func (b *Backend) Allocate(ctx context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
	if err := b.Live(); err != nil {
		return 0, 0, err
	}
	if err := b.rt.CheckOrdinal(ordinal); err != nil {
		return 0, 0, err
	}
	name := b.rt.drv.Name()
	if bytes == 0 {
		return 0, 0, sdk.Errorf(sdk.ErrInvalidArgument, "allocate 0 bytes on %s device %d", name, ordinal)
	}
	w, err := b.rt.Worker(ordinal)
	if err != nil {
		return 0, 0, err
	}
	fdd := descriptors(b.rt.drv)
	m := &memory{ordinal: ordinal, size: bytes, fd: fdd != nil}
	err = w.Do(ctx, func() error {
		var err error
		if fdd != nil {
			m.ptr, err = fdd.CreateFD(ordinal, bytes)
		} else {
			m.ptr, err = b.rt.drv.Malloc(bytes)
		}
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("allocate %d bytes on %s device %d: %w", bytes, name, ordinal, err)
	}
	if err := b.rt.register(m); err != nil {
		return 0, 0, errors.Join(fmt.Errorf("allocate on %s device %d: %w", name, ordinal, err), b.rt.release(context.Background(), m, w))
	}
	id, err := b.ids.Add(m)
	if err != nil {
		b.release(m)
		return 0, 0, err
	}
	return id, bytes, nil
}

// Free drops the id. The allocation is freed, or the IPC mapping closed,
// when no other id and no running operation references it any more. An
// unknown or already freed id is ErrNoSuchAllocation.
func (b *Backend) Free(ctx context.Context, id sdk.AllocationID) error {
	m, err := b.ids.Remove(id)
	if err != nil {
		return err
	}
	if err := b.rt.drop(m); err != nil {
		return fmt.Errorf("free allocation %d: %w", id, err)
	}
	return nil
}

var _ sdk.StatsLoader = (*Backend)(nil)

// Load copies every extent from its file into the allocation through the
// shared fill pipeline (sdk/fill) with the Driver's Copier, and returns
// after every copy completed. Loads into several allocations of one device
// run at once and share the device's lanes. An extent outside the
// allocation or past its file's end, or a file that cannot be opened, is
// ErrInvalidArgument and nothing is copied. Close stops a running Load.
func (b *Backend) Load(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
	_, err := b.LoadWithStats(ctx, id, extents, progress)
	return err
}

// LoadWithStats is Load returning the fill pipeline's counters.
func (b *Backend) LoadWithStats(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) (sdk.LoadStats, error) {
	m, w, err := b.holdOnWorker(id)
	if err != nil {
		return sdk.LoadStats{}, err
	}
	defer b.release(m)
	if m.readOnly {
		return sdk.LoadStats{}, sdk.Errorf(sdk.ErrInvalidArgument, "load into allocation %d: a read-only import of a descriptor (imports cannot write)", id)
	}
	w.loadMu.RLock()
	defer w.loadMu.RUnlock()
	ctx, cancel := b.rt.untilClosed(ctx)
	defer cancel(nil)
	st, err := fill.Fill(ctx, b.rt.drv.Copier(w, m.ptr), m.size, extents, progress, b.rt.drv.FillOptions())
	if err != nil {
		return st, fmt.Errorf("load into allocation %d: %w", id, err)
	}
	return st, nil
}

// Read copies [offset, offset+length) of the allocation or mapping to the
// host. length above sdk.MaxReadBytes or a range past the end is
// ErrInvalidArgument.
func (b *Backend) Read(ctx context.Context, id sdk.AllocationID, offset, length uint64) ([]byte, error) {
	m, err := b.hold(id)
	if err != nil {
		return nil, err
	}
	defer b.release(m)
	if err := readback.CheckRead(offset, length, m.size); err != nil {
		return nil, err
	}
	w, err := b.rt.Worker(m.ordinal)
	if err != nil {
		return nil, err
	}
	out := make([]byte, length)
	if err := w.Do(ctx, func() error { return b.rt.drv.MemcpyDtoH(out, m.ptr+Ptr(offset)) }); err != nil {
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
	w, err := b.rt.Worker(m.ordinal)
	if err != nil {
		return nil, err
	}
	out, err := readback.Digest(ctx, ranges, largest, func(buf []byte, off uint64) <-chan error {
		src := m.ptr + Ptr(off)
		return w.Submit(ctx, func() error { return b.rt.drv.MemcpyDtoH(buf, src) })
	})
	if err != nil {
		return nil, fmt.Errorf("digest allocation %d: %w", id, err)
	}
	return out, nil
}
