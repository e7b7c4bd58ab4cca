package client

import (
	"errors"
	"fmt"
	"strings"

	"github.com/wcache/wcache/sdk/names"
)

// ErrNotMappable is matched by every *NotMappableError.
var ErrNotMappable = errors.New("handle cannot be mapped by this process")

// NotMappableError: a manifest handle is of a kind for which the Mappers in
// use hold no Mapper (a "cuda-ipc" handle needs the CUDA runtime of an
// engine; a vendor kind needs the vendor's Mapper, see Mappers.Register).
// It matches ErrNotMappable.
type NotMappableError struct {
	Handle     int      // index into Manifest.Handles
	Kind       string   // the handle's kind
	Registered []string // the kinds that have a mapper; nil: DefaultMappers'
}

func (e *NotMappableError) Error() string {
	registered := e.Registered
	if registered == nil {
		registered = DefaultMappers().Kinds()
	}
	msg := fmt.Sprintf("handle %d is of kind %q, for which this process has no mapper (mappers: %s)",
		e.Handle, e.Kind, strings.Join(registered, ", "))
	switch {
	case names.IsVendorKind(e.Kind):
		msg += fmt.Sprintf("; %q is a vendor kind: register the vendor's mapper with "+
			"client.Mappers.Register(%q, mapper) and map with that registry's Map (docs/writing-a-backend.md, \"Handle kinds\")",
			e.Kind, e.Kind)
	case e.Kind == names.KindCUDAIPC || e.Kind == names.KindHIPIPC:
		msg += "; it needs the GPU runtime of an engine (the Python client maps it), or an Importer for Verify"
	}
	return msg
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
	list     []MappedTensor
	byName   map[string]int
	maps     [][]byte
	releases []func() error
}

// Map is DefaultMappers().Map(m): posix-shm and memfd handles can be mapped.
func Map(m *Manifest) (*Tensors, error) { return DefaultMappers().Map(m) }

// Map maps every handle of m read-only (each once, whatever its tensor
// count) with the mapper registered for its kind and returns its tensors in
// manifest order. A handle whose kind has no mapper is a *NotMappableError
// (ErrNotMappable) and maps nothing; a mapper that fails or returns fewer
// than the handle's Size bytes fails the whole Map, and what was mapped is
// released. Keep the lease open while the tensors are used: after it ends
// the daemon may free the memory (the mapping stays readable, but the
// daemon no longer vouches for it).
func (r *Mappers) Map(m *Manifest) (*Tensors, error) {
	mappers := make([]Mapper, len(m.Handles))
	for i, h := range m.Handles {
		mp, ok := r.Lookup(h.Kind)
		if !ok {
			return nil, &NotMappableError{Handle: i, Kind: h.Kind, Registered: r.Kinds()}
		}
		mappers[i] = mp
	}
	ts := &Tensors{list: make([]MappedTensor, len(m.Tensors)), byName: make(map[string]int, len(m.Tensors)),
		maps: make([][]byte, len(m.Handles)), releases: make([]func() error, len(m.Handles))}
	for i, h := range m.Handles {
		mapping, err := mappers[i].Map(h)
		if err != nil {
			_ = ts.Close()
			return nil, fmt.Errorf("map handle %d (%s): %w", i, h.Kind, err)
		}
		ts.releases[i] = mapping.Release
		if uint64(len(mapping.Data)) < h.Size {
			_ = ts.Close()
			return nil, fmt.Errorf("map handle %d (%s): the mapper returned %d bytes for a handle of %d", i, h.Kind, len(mapping.Data), h.Size)
		}
		ts.maps[i] = mapping.Data[:h.Size:h.Size]
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
	for i, release := range ts.releases {
		if release != nil {
			if err := release(); err != nil {
				errs = append(errs, fmt.Errorf("handle %d: %w", i, err))
			}
		}
		ts.releases[i] = nil
	}
	clear(ts.maps)
	ts.list, ts.byName = nil, nil
	return errors.Join(errs...)
}
