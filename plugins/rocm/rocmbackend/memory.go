package rocmbackend

import (
	"context"
	"fmt"

	"github.com/wcache/wcache/plugins/rocm/hip"
)

// deviceMemory is one hipMalloc allocation of this process, or one mapping
// of another process's allocation opened with hipIpcOpenMemHandle. Backend
// ids and running operations hold references (refs, under Runtime.mu); the
// last release frees or closes it on the device's worker.
type deviceMemory struct {
	ordinal  int
	ptr      hip.DevicePtr
	size     uint64
	imported bool
	// handle is the IPC handle: the one Export made (nil until then) or
	// the one Import opened.
	handle *hip.IPCHandle
	refs   int
}

// release frees the allocation (hipFree) or closes the mapping
// (hipIpcCloseMemHandle) on w. The caller has removed m from the registry.
func (m *deviceMemory) release(ctx context.Context, h *hip.Runtime, w *worker) error {
	err := w.thread.Do(ctx, func() error {
		if m.imported {
			return h.IpcCloseMemHandle(m.ptr)
		}
		return h.Free(m.ptr)
	})
	if err != nil {
		what := "free allocation"
		if m.imported {
			what = "close IPC mapping"
		}
		return fmt.Errorf("%s of %d bytes on device %d: %w", what, m.size, m.ordinal, err)
	}
	return nil
}

// register adds a new memory object with one reference.
func (rt *Runtime) register(m *deviceMemory) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return errClosed
	}
	m.refs = 1
	rt.mems[m] = struct{}{}
	if m.imported {
		rt.imports[importKey{handle: *m.handle, ordinal: m.ordinal}] = m
	}
	return nil
}

// acquire adds a reference to a live memory object; false once it is gone.
func (rt *Runtime) acquire(m *deviceMemory) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.mems[m]; !ok {
		return false
	}
	m.refs++
	return true
}

// drop removes one reference; the last frees the memory.
func (rt *Runtime) drop(m *deviceMemory) error {
	rt.mu.Lock()
	if _, ok := rt.mems[m]; !ok {
		rt.mu.Unlock()
		return nil // freed by Close
	}
	if m.refs--; m.refs > 0 {
		rt.mu.Unlock()
		return nil
	}
	delete(rt.mems, m)
	if m.handle != nil {
		if m.imported {
			delete(rt.imports, importKey{handle: *m.handle, ordinal: m.ordinal})
		} else {
			delete(rt.exports, *m.handle)
		}
	}
	w := rt.workers[m.ordinal]
	rt.mu.Unlock()
	if w == nil {
		return errClosed
	}
	return m.release(context.Background(), rt.hip, w)
}
