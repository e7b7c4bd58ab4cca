package gpucore

import (
	"context"
	"fmt"
)

// memory is one allocation of this process, or one mapping of another
// process's allocation opened through IPC. Backend ids and running
// operations hold references (refs, under Runtime.mu); the last release
// frees or closes it on the device's worker.
type memory struct {
	ordinal  int
	ptr      Ptr
	size     uint64
	imported bool
	// fd: descriptor memory (FDDriver), created or imported; Driver.Free
	// releases both, and no IPC handle names it.
	fd bool
	// readOnly: a descriptor import, mapped read-only (FDDriver.ImportFD):
	// Load refuses it before any copy reaches the driver.
	readOnly bool
	// handle is the IPC handle: the one Export made (nil until then) or
	// the one Import opened.
	handle *Handle
	refs   int
}

// release frees the allocation or closes the mapping on w. The caller has
// removed m from the registry.
func (rt *Runtime) release(ctx context.Context, m *memory, w *Worker) error {
	err := w.Do(ctx, func() error {
		if m.imported && !m.fd {
			return rt.drv.IpcClose(m.ptr)
		}
		return rt.drv.Free(m.ptr)
	})
	if err != nil {
		what := "free allocation"
		if m.imported {
			what = "close IPC mapping"
			if m.fd {
				what = "unmap imported descriptor"
			}
		}
		return fmt.Errorf("%s of %d bytes on device %d: %w", what, m.size, m.ordinal, err)
	}
	return nil
}

// register adds a new memory object with one reference.
func (rt *Runtime) register(m *memory) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return rt.errClosed
	}
	m.refs = 1
	rt.mems[m] = struct{}{}
	if m.imported && m.handle != nil {
		rt.imports[importKey{handle: *m.handle, ordinal: m.ordinal}] = m
	}
	return nil
}

// acquire adds a reference to a live memory object; false once it is gone.
func (rt *Runtime) acquire(m *memory) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.mems[m]; !ok {
		return false
	}
	m.refs++
	return true
}

// drop removes one reference; the last frees the memory.
func (rt *Runtime) drop(m *memory) error {
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
		return rt.errClosed
	}
	return rt.release(context.Background(), m, w)
}

// shared returns, with a reference taken, memory the handle already names
// in this process: an allocation this process exported, or a mapping of
// the handle already opened on ordinal.
func (rt *Runtime) shared(key Handle, ordinal int) (*memory, bool) {
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
