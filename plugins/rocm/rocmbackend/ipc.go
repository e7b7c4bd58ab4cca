package rocmbackend

import (
	"context"
	"errors"
	"fmt"

	"github.com/wcache/wcache/plugins/rocm/hip"
	"github.com/wcache/wcache/sdk"
)

// Export returns the hip-ipc handle of the allocation: the 64-byte
// hipIpcMemHandle_t of its base (hipIpcGetMemHandle), taken after
// hipDeviceSynchronize so that every copy is complete. Size is the
// allocation's size. The handle is made once per allocation and cached;
// exporting an imported mapping returns the handle it was opened from.
//
// Another process on the same machine (same PID namespace) opens it with
// hipIpcOpenMemHandle(…, hipIpcMemLazyEnablePeerAccess), with byte offsets
// from the allocation base. The allocation must outlive every importer's
// mapping: freeing it first is undefined behaviour in HIP.
func (b *Backend) Export(ctx context.Context, id sdk.AllocationID) (sdk.Handle, error) {
	m, err := b.hold(id)
	if err != nil {
		return sdk.Handle{}, err
	}
	defer b.release(m)
	w, err := b.rt.worker(m.ordinal)
	if err != nil {
		return sdk.Handle{}, err
	}
	b.rt.mu.Lock()
	h := m.handle
	b.rt.mu.Unlock()
	var made hip.IPCHandle
	err = w.thread.Do(ctx, func() error {
		if err := b.rt.hip.DeviceSynchronize(); err != nil {
			return err
		}
		if h != nil {
			return nil
		}
		made, err = b.rt.hip.IpcGetMemHandle(m.ptr)
		return err
	})
	if err != nil {
		return sdk.Handle{}, fmt.Errorf("export allocation %d: %w", id, err)
	}
	if h == nil {
		b.rt.mu.Lock()
		if m.handle == nil {
			m.handle = &made
			if _, live := b.rt.mems[m]; live {
				b.rt.exports[made] = m
			}
		}
		h = m.handle
		b.rt.mu.Unlock()
	}
	return sdk.Handle{Kind: HandleKind, Data: append([]byte(nil), h[:]...), Size: m.size}, nil
}

// Import maps a hip-ipc handle on the device this process sees as ordinal
// and returns an id for Read, Digest, Load and Free.
//
//   - A handle this process exported (by any Backend of its Runtime) maps
//     to the original allocation: HIP cannot open a handle in the process
//     that made it (hipErrorInvalidContext).
//   - Any other handle is opened with hipIpcOpenMemHandle and
//     hipIpcMemLazyEnablePeerAccess once per process and device; importing
//     it again returns a new id sharing that mapping, closed when the last
//     id is freed.
//
// A kind other than hip-ipc is ErrUnsupported; an unknown ordinal
// ErrNoSuchDevice; data that is not 64 bytes, a zero size, a size larger
// than the mapped allocation, or a handle HIP cannot open (stale, garbage,
// from another PID namespace) ErrInvalidArgument.
func (b *Backend) Import(ctx context.Context, ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	if err := b.live(); err != nil {
		return 0, err
	}
	if h.Kind != HandleKind {
		return 0, sdk.Errorf(sdk.ErrUnsupported, "import a %q handle: the ROCm backend imports %q handles only", h.Kind, HandleKind)
	}
	if _, err := b.rt.device(ordinal); err != nil {
		return 0, err
	}
	if len(h.Data) != hip.IPCHandleSize {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import: a hip-ipc handle is %d bytes, this one %d", hip.IPCHandleSize, len(h.Data))
	}
	if h.Size == 0 {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import: handle of 0 bytes")
	}
	var key hip.IPCHandle
	copy(key[:], h.Data)

	b.rt.importMu.Lock()
	defer b.rt.importMu.Unlock()
	if m, ok := b.rt.shared(key, ordinal); ok {
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
	if err := b.rt.register(m); err != nil {
		return 0, err
	}
	id, err := b.ids.Add(m)
	if err != nil {
		b.release(m)
	}
	return id, err
}

// shared returns, with a reference taken, memory the handle already names
// in this process: an allocation this process exported, or a mapping of
// the handle already opened on ordinal.
func (rt *Runtime) shared(key hip.IPCHandle, ordinal int) (*deviceMemory, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	m, ok := rt.exports[key]
	if !ok {
		m, ok = rt.imports[importKey{handle: key, ordinal: ordinal}]
	}
	if !ok {
		return nil, false
	}
	if _, live := rt.mems[m]; !live {
		return nil, false
	}
	m.refs++
	return m, true
}

// open maps the handle on ordinal's worker and checks the mapping holds
// size bytes.
func (b *Backend) open(ctx context.Context, key hip.IPCHandle, ordinal int, size uint64) (*deviceMemory, error) {
	w, err := b.rt.worker(ordinal)
	if err != nil {
		return nil, err
	}
	h := b.rt.hip
	m := &deviceMemory{ordinal: ordinal, size: size, imported: true, handle: &key}
	var mapped uint64
	err = w.thread.Do(ctx, func() error {
		p, err := h.IpcOpenMemHandle(key, hip.IPCMemLazyEnablePeerAccess)
		if err != nil {
			return err
		}
		m.ptr = p
		if !h.HasMemGetAddressRange() {
			return nil
		}
		if base, n, err := h.MemGetAddressRange(p); err == nil && p >= base {
			mapped = n - uint64(p-base)
		}
		return nil
	})
	if err != nil {
		var he *hip.Error
		if errors.As(err, &he) && (errors.Is(err, sdk.ErrOutOfMemory) || errors.Is(err, sdk.ErrUnavailable)) {
			return nil, fmt.Errorf("import hip-ipc handle on device %d: %w", ordinal, err)
		}
		if he != nil && he.Code == hip.ErrorInvalidContext {
			return nil, sdk.Errorf(sdk.ErrInvalidArgument, "import hip-ipc handle on device %d: %v (a handle cannot be opened by the process that exported it, nor from another PID namespace)", ordinal, err)
		}
		if he != nil {
			return nil, sdk.Errorf(sdk.ErrInvalidArgument, "import hip-ipc handle on device %d: %v", ordinal, err)
		}
		return nil, fmt.Errorf("import hip-ipc handle on device %d: %w", ordinal, err)
	}
	if mapped != 0 && size > mapped {
		closeErr := w.thread.Do(context.Background(), func() error { return h.IpcCloseMemHandle(m.ptr) })
		return nil, errors.Join(sdk.Errorf(sdk.ErrInvalidArgument, "import: handle claims %d bytes, the mapped allocation holds %d", size, mapped), closeErr)
	}
	return m, nil
}
