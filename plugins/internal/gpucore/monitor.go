package gpucore

import "sync"

// Monitor holds a vendor runtime's management library (NVML, amdsmi), which
// the runtime may lack: Set gives it at open, Get returns it (the zero L,
// nil for a pointer, when absent or once closed) and Close closes it once.
// It is safe for concurrent use; the zero Monitor holds none.
type Monitor[L interface {
	comparable
	Close() error
}] struct {
	mu  sync.Mutex
	lib L
}

// Set makes lib the library held.
func (m *Monitor[L]) Set(lib L) {
	m.mu.Lock()
	m.lib = lib
	m.mu.Unlock()
}

// Get returns the library held, or the zero L.
func (m *Monitor[L]) Get() L {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lib
}

// Close closes the library held, if any, and holds none after; a second
// Close does nothing.
func (m *Monitor[L]) Close() error {
	var none L
	m.mu.Lock()
	lib := m.lib
	m.lib = none
	m.mu.Unlock()
	if lib == none {
		return nil
	}
	return lib.Close()
}
