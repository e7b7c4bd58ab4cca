package client

import (
	"errors"
	"fmt"
)

// ErrNotMappable is matched by every *NotMappableError.
var ErrNotMappable = errors.New("handle cannot be mapped by this process")

// NotMappableError: a manifest handle is of a kind this process cannot map
// into its own address space (a "cuda-ipc" handle needs the CUDA runtime of
// an engine; core/client maps only posix-shm). It matches ErrNotMappable.
type NotMappableError struct {
	Handle int    // index into Manifest.Handles
	Kind   string // the handle's kind
}

func (e *NotMappableError) Error() string {
	return fmt.Sprintf("handle %d is %q: only %s and %s handles can be mapped by this process", e.Handle, e.Kind, HandleMemfd, HandlePosixShm)
}

func (e *NotMappableError) Unwrap() error { return ErrNotMappable }

// MappedTensor is one tensor of a mapped manifest: its identity and its
// bytes in the daemon's memory.
type MappedTensor struct {
	Name  string
	DType string // safetensors spelling: "BF16", "F32", ...
	Shape []uint64
	// Data is the tensor's bytes, a read-only view into the daemon's
	// shared memory: valid until Tensors.Close, and writing to it faults.
	Data []byte
}

// Tensors is a manifest mapped into this process: every handle mapped once,
// every tensor a view at its offset. Close unmaps; the views are invalid
// afterwards. A Tensors is safe for concurrent readers; Close must not race
// them.
type Tensors struct {
	list   []MappedTensor
	byName map[string]int
	maps   [][]byte
}

// Map maps every handle of m read-only (each once, whatever its tensor
// count) and returns its tensors in manifest order. Only posix-shm and
// memfd handles (their descriptors, received by Attach) can be mapped by a
// Go process; a manifest with another kind is a
// *NotMappableError (ErrNotMappable) and maps nothing. Keep the lease open
// while the tensors are used: after it ends the daemon may free the memory
// (the mapping stays readable, but the daemon no longer vouches for it).
func Map(m *Manifest) (*Tensors, error) {
	for i, h := range m.Handles {
		if !mappable(h.Kind) {
			return nil, &NotMappableError{Handle: i, Kind: h.Kind}
		}
	}
	ts := &Tensors{list: make([]MappedTensor, len(m.Tensors)), byName: make(map[string]int, len(m.Tensors)),
		maps: make([][]byte, len(m.Handles))}
	for i, h := range m.Handles {
		data, err := MapHandle(i, h)
		if err != nil {
			_ = ts.Close()
			return nil, fmt.Errorf("map handle %d: %w", i, err)
		}
		ts.maps[i] = data
	}
	for i, t := range m.Tensors {
		// The manifest was checked on arrival (every tensor inside its
		// handle); a hand-built one is checked here.
		if t.Handle < 0 || t.Handle >= len(ts.maps) || t.Offset > uint64(len(ts.maps[t.Handle])) ||
			t.Length > uint64(len(ts.maps[t.Handle]))-t.Offset {
			_ = ts.Close()
			return nil, fmt.Errorf("tensor %q [%d, +%d) of handle %d: %w", t.Name, t.Offset, t.Length, t.Handle, ErrBadManifest)
		}
		ts.list[i] = MappedTensor{Name: t.Name, DType: t.DType, Shape: t.Shape,
			Data: ts.maps[t.Handle][t.Offset : t.Offset+t.Length : t.Offset+t.Length]}
		ts.byName[t.Name] = i
	}
	return ts, nil
}

// All is every tensor in manifest order. The slice is shared: do not
// modify it.
func (ts *Tensors) All() []MappedTensor { return ts.list }

// Len is the number of tensors.
func (ts *Tensors) Len() int { return len(ts.list) }

// Get is the tensor called name.
func (ts *Tensors) Get(name string) (MappedTensor, bool) {
	i, ok := ts.byName[name]
	if !ok {
		return MappedTensor{}, false
	}
	return ts.list[i], true
}

// Close unmaps every handle. It is idempotent; every view is invalid
// afterwards.
func (ts *Tensors) Close() error {
	var errs []error
	for i, data := range ts.maps {
		if err := Unmap(data); err != nil {
			errs = append(errs, fmt.Errorf("handle %d: %w", i, err))
		}
		ts.maps[i] = nil
	}
	ts.list, ts.byName = nil, nil
	return errors.Join(errs...)
}
