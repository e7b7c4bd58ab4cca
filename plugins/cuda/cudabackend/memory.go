package cudabackend

import (
	"context"
	"fmt"

	"github.com/wcache/wcache/plugins/cuda/driver"
)

// deviceMemory is one cuMemAlloc allocation of this process, or one
// mapping of another process's allocation opened with
// cuIpcOpenMemHandle_v2. Backend ids and running operations hold
// references (refs, under Runtime.mu); the last release frees or closes it
// on the device's worker.
type deviceMemory struct {
	ordinal  int
	ptr      driver.DevicePtr
	size     uint64
	imported bool
	// handle is the IPC handle: the one Export made (nil until then) or
	// the one Import opened.
	handle *driver.IPCHandle
	refs   int
}

// release frees the allocation (cuMemFree_v2) or closes the mapping
// (cuIpcCloseMemHandle) on w. The caller has removed m from the registry.
func (m *deviceMemory) release(ctx context.Context, drv *driver.Driver, w *worker) error {
	err := w.do(ctx, func() error {
		if m.imported {
			return drv.IpcCloseMemHandle(m.ptr)
		}
		return drv.MemFree(m.ptr)
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
	m.refs--
	if m.refs > 0 {
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
	return m.release(context.Background(), rt.drv, w)
}
