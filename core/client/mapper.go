package client

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
)

// Mapper maps the handles of one kind into this process, without write
// access to the daemon's memory (the core's host-memory mappers map
// copy-on-write: a write stays this process's). A
// vendor whose backend exports its own kind (x-VENDOR-NAME, see
// docs/protocol.md) ships a Mapper for it; the program that maps manifests
// registers it in its Mappers.
type Mapper interface {
	// Map maps h (whose Kind is the one the Mapper was registered for) and
	// returns at least h.Size bytes. It must not write to the memory.
	Map(h Handle) (Mapping, error)
}

// MapperFunc adapts a function to Mapper.
type MapperFunc func(h Handle) (Mapping, error)

// Map calls f.
func (f MapperFunc) Map(h Handle) (Mapping, error) { return f(h) }

// Mapping is one mapped handle.
type Mapping struct {
	// Data is the handle's memory; Tensors views its first Size bytes.
	Data []byte
	// Release unmaps Data; nil when there is nothing to release. Tensors
	// calls it once, from Close.
	Release func() error
}

// ErrMapperRegistered: Register was called twice for one kind.
var ErrMapperRegistered = errors.New("a mapper is already registered for this handle kind")

// Mappers is a registry of Mappers by handle kind: a value, so that two
// parts of a program can map with different sets and nothing is global.
// DefaultMappers holds the core's posix-shm mapper; a vendor's is added
// with Register. A Mappers is not safe for concurrent Register; Map and
// Lookup may run concurrently once registration is done.
type Mappers struct {
	byKind map[string]Mapper
}

// NewMappers returns an empty registry.
func NewMappers() *Mappers { return &Mappers{byKind: map[string]Mapper{}} }

// DefaultMappers returns a registry holding the mappers the core ships:
// posix-shm (MapShm) and memfd (MapFile of the descriptor Attach received
// on the daemon's descriptor channel). cuda-ipc, hip-ipc and cuda-vmm-fd
// need a GPU runtime and have none here.
func DefaultMappers() *Mappers {
	r := NewMappers()
	r.byKind[names.KindPosixShm] = MapperFunc(mapShmHandle)
	r.byKind[names.KindMemfd] = MapperFunc(mapMemfdHandle)
	return r
}

// Register adds m for kind. kind must satisfy names.ValidateHandleKind (a
// core kind, or a vendor kind x-VENDOR-NAME: *names.InvalidHandleKindError
// otherwise); a kind that already has a mapper is ErrMapperRegistered; a
// nil m is an error.
func (r *Mappers) Register(kind string, m Mapper) error {
	if err := names.ValidateHandleKind(kind); err != nil {
		return fmt.Errorf("register a mapper: %w", err)
	}
	if m == nil {
		return fmt.Errorf("register a mapper for %q: nil Mapper", kind)
	}
	if _, ok := r.byKind[kind]; ok {
		return fmt.Errorf("register a mapper for %q: %w", kind, ErrMapperRegistered)
	}
	r.byKind[kind] = m
	return nil
}

// Lookup returns the mapper registered for kind.
func (r *Mappers) Lookup(kind string) (Mapper, bool) {
	m, ok := r.byKind[kind]
	return m, ok
}

// Kinds lists the registered kinds, sorted.
func (r *Mappers) Kinds() []string { return slices.Sorted(maps.Keys(r.byKind)) }

// mapShmHandle is the posix-shm Mapper: Data is the file's path. The
// pages are populated per $WCACHE_POPULATE (populate.go).
func mapShmHandle(h Handle) (Mapping, error) {
	mode, err := PopulateFromEnv()
	if err != nil {
		return Mapping{}, err
	}
	data, err := MapShm(string(h.Data), h.Size)
	if err != nil {
		return Mapping{}, err
	}
	wait := populated(data, mode)
	return Mapping{Data: data, Release: func() error { wait(); return Unmap(data) }}, nil
}

// mapMemfdHandle is the memfd Mapper: File is the descriptor. The pages
// are populated per $WCACHE_POPULATE (populate.go).
func mapMemfdHandle(h Handle) (Mapping, error) {
	mode, err := PopulateFromEnv()
	if err != nil {
		return Mapping{}, err
	}
	data, err := MapHandle(0, h)
	if err != nil {
		return Mapping{}, err
	}
	wait := populated(data, mode)
	return Mapping{Data: data, Release: func() error { wait(); return Unmap(data) }}, nil
}

// MapSDKHandle maps a backend's handle with the registered mappers, for
// sdk/backendtest's Options.MapHandle (the suite checks that what a
// backend exports is mappable by this client): the bytes, their release,
// or the *NotMappableError / the mapper's error.
func (r *Mappers) MapSDKHandle(h sdk.Handle) ([]byte, func() error, error) {
	m, ok := r.Lookup(h.Kind)
	if !ok {
		return nil, nil, &NotMappableError{Kind: h.Kind, Registered: r.Kinds()}
	}
	mapping, err := m.Map(Handle{Kind: h.Kind, Data: h.Data, Size: h.Size, File: h.File})
	if err != nil {
		return nil, nil, fmt.Errorf("map a %s handle: %w", h.Kind, err)
	}
	return mapping.Data, mapping.Release, nil
}
