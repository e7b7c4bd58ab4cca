package gpucore

import (
	"context"
	"errors"
	"fmt"

	"github.com/wcache/wcache/sdk"
)

// Export returns the IPC handle of the allocation: the 64 bytes of its
// base, taken after Driver.Synchronize so that every copy is complete.
// With descriptor handles (FDDriver) it is a new descriptor of the memory
// instead (Handle.File, owned by the caller; see exportFD).
// Size is the allocation's size. The handle is made once per allocation
// and cached; exporting an imported mapping returns the handle it was
// opened from.
func (b *Backend) Export(ctx context.Context, id sdk.AllocationID) (sdk.Handle, error) {
	m, w, err := b.holdOnWorker(id)
	if err != nil {
		return sdk.Handle{}, err
	}
	defer b.release(m)
	if m.fd {
		return b.exportFD(ctx, b.rt.drv.(FDDriver), w, id, m)
	}
	rt := b.rt
	rt.mu.Lock()
	h := m.handle
	rt.mu.Unlock()
	var made Handle
	err = w.Do(ctx, func() error {
		if err := rt.drv.Synchronize(); err != nil {
			return err
		}
		if h != nil {
			return nil
		}
		made, err = rt.drv.IpcGet(m.ptr)
		return err
	})
	if err != nil {
		return sdk.Handle{}, fmt.Errorf("export allocation %d: %w", id, err)
	}
	if h == nil {
		rt.mu.Lock()
		if m.handle == nil {
			m.handle = &made
			if _, live := rt.mems[m]; live {
				rt.exports[made] = m
			}
		}
		h = m.handle
		rt.mu.Unlock()
	}
	return sdk.Handle{Kind: rt.drv.HandleKind(), Data: append([]byte(nil), h[:]...), Size: m.size}, nil
}

// Import maps an IPC handle on the device this process sees as ordinal and
// returns an id for Read, Digest, Load and Free.
//
//   - A handle this process exported (by any Backend of its Runtime) maps
//     to the original allocation: legacy IPC cannot open a handle in the
//     process that made it.
//   - Any other handle is opened with the Driver once per process and
//     device; importing it again returns a new id sharing that mapping,
//     closed when the last id is freed.
//
// A handle of an FDDriver's DescriptorKind is imported by importFD
// instead, whatever kind the Backend exports.
//
// A kind other than the Driver's is ErrUnsupported; an unknown ordinal
// ErrNoSuchDevice; data that is not 64 bytes, a zero size, a size larger
// than the mapped allocation, or a handle the driver cannot open
// (Driver.OpenError) ErrInvalidArgument.
func (b *Backend) Import(ctx context.Context, ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	if err := b.Live(); err != nil {
		return 0, err
	}
	rt := b.rt
	kind := rt.drv.HandleKind()
	fdd := importsFD(rt.drv, h.Kind)
	if h.Kind != kind && fdd == nil {
		return 0, sdk.Errorf(sdk.ErrUnsupported, "import a %q handle: the %s backend imports %q handles only", h.Kind, rt.drv.Name(), kind)
	}
	if err := rt.CheckOrdinal(ordinal); err != nil {
		return 0, err
	}
	if fdd != nil {
		return b.importFD(ctx, fdd, ordinal, h)
	}
	if len(h.Data) != HandleSize {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import: a %s handle is %d bytes, this one %d", kind, HandleSize, len(h.Data))
	}
	if h.Size == 0 {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import: handle of 0 bytes")
	}
	var key Handle
	copy(key[:], h.Data)

	rt.importMu.Lock()
	defer rt.importMu.Unlock()
	if m, ok := rt.shared(key, ordinal); ok {
		if h.Size > m.size {
			b.release(m)
			return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import: handle claims %d bytes, the allocation holds %d", h.Size, m.size)
		}
		id, err := b.ids.Add(m)
		if err != nil {
			b.release(m)
		}
		return id, err
	}
	m, err := b.open(ctx, key, ordinal, h.Size)
	if err != nil {
		return 0, err
	}
	if err := rt.register(m); err != nil {
		return 0, err
	}
	id, err := b.ids.Add(m)
	if err != nil {
		b.release(m)
	}
	return id, err
}

// open maps the handle on ordinal's worker and checks the mapping holds
// size bytes.
func (b *Backend) open(ctx context.Context, key Handle, ordinal int, size uint64) (*memory, error) {
	w, err := b.rt.Worker(ordinal)
	if err != nil {
		return nil, err
	}
	drv := b.rt.drv
	m := &memory{ordinal: ordinal, size: size, imported: true, handle: &key}
	var mapped uint64
	err = w.Do(ctx, func() error {
		p, err := drv.IpcOpen(key)
		if err != nil {
			return err
		}
		m.ptr = p
		mapped = drv.MappedBytes(p)
		return nil
	})
	if err != nil {
		return nil, openError(drv, drv.HandleKind(), ordinal, err)
	}
	if mapped != 0 && size > mapped {
		closeErr := w.Do(context.Background(), func() error { return drv.IpcClose(m.ptr) })
		return nil, errors.Join(sdk.Errorf(sdk.ErrInvalidArgument, "import: handle claims %d bytes, the mapped allocation holds %d", size, mapped), closeErr)
	}
	return m, nil
}

// openError turns a failed IpcOpen into what Import returns: out of memory
// and unavailable keep their kind; any other driver failure means a handle
// the driver cannot open here (garbage, stale, this process's own, another
// PID namespace's): ErrInvalidArgument.
func openError(drv Driver, kind string, ordinal int, err error) error {
	what := fmt.Sprintf("import %s handle on device %d", kind, ordinal)
	driverErr, invalidContext := drv.OpenFailure(err)
	switch {
	case !driverErr || errors.Is(err, sdk.ErrOutOfMemory) || errors.Is(err, sdk.ErrUnavailable):
		return fmt.Errorf("%s: %w", what, err)
	case invalidContext:
		return sdk.Errorf(sdk.ErrInvalidArgument, "%s: %v (a handle cannot be opened by the process that exported it, nor from another PID namespace)", what, err)
	default:
		return sdk.Errorf(sdk.ErrInvalidArgument, "%s: %v", what, err)
	}
}
