package plan

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/wcache/wcache/core/safetensors"
)

// ErrInvalidTable is wrapped by every error BuildTable returns for a table
// that does not hold together (a duplicate name, a length that does not
// match the shape, storages of different sizes, …).
var ErrInvalidTable = errors.New("invalid tensor table")

// Entry is one row of a tensor table: a tensor a client holds in memory and
// wants placed (a publish), as opposed to a tensor read from a file.
type Entry struct {
	Name  string
	DType string // safetensors spelling where it has one; any non-empty string otherwise
	Shape []uint64
	// Length is the number of bytes to reserve: the tensor's bytes, or the
	// bytes of its whole storage when Storage is set.
	Length uint64
	// Storage, when not empty, names a buffer shared by several entries
	// (views of one storage): they get one byte range, placed once. Every
	// entry of a storage must have the same Length.
	Storage string
}

// BuildTable plans a tensor table with the same arena rules as Build: at
// most MaxArenaBytes per allocation, each range (each storage once) at a
// TensorAlignment boundary, in table order. The plan's Tensors are in table
// order; its allocations have no extents (the client fills them). Errors:
// ErrInvalidOptions, ErrEmpty (no bytes at all), *TooLargeError and
// ErrInvalidTable.
//
// An entry without Storage whose DType is a safetensors dtype must have
// Length equal to its elements times the element size.
func BuildTable(entries []Entry, opts Options) (*Plan, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkTable(entries); err != nil {
		return nil, err
	}
	type place struct {
		handle uint32
		offset uint64
	}
	storages := map[string]place{}
	b := &builder{opts: opts, plan: &Plan{Options: opts, Tensors: make([]Tensor, 0, len(entries))}}
	for _, e := range entries {
		p, shared := storages[e.Storage]
		if !shared || e.Storage == "" {
			if e.Length > opts.MaxArenaBytes {
				return nil, &TooLargeError{Path: "the tensor table", Tensor: e.Name, Bytes: e.Length, MaxArenaBytes: opts.MaxArenaBytes}
			}
			p.handle, p.offset = b.reserve(e.Length, TensorAlignment, 0)
			b.plan.Bytes += e.Length
			if e.Storage != "" {
				storages[e.Storage] = p
			}
		}
		b.plan.Tensors = append(b.plan.Tensors, Tensor{Name: e.Name, DType: e.DType, Shape: e.Shape,
			Handle: p.handle, Offset: p.offset, Length: e.Length})
	}
	b.closeArena()
	if b.plan.Bytes == 0 {
		return nil, fmt.Errorf("tensor table of %d entries: %w", len(entries), ErrEmpty)
	}
	return b.plan, nil
}

// checkTable returns every problem of a table at once.
func checkTable(entries []Entry) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format+": %w", append(args, ErrInvalidTable)...))
	}
	if len(entries) == 0 {
		bad("no tensor")
	}
	names := make(map[string]bool, len(entries))
	storageLen := map[string]uint64{}
	for i, e := range entries {
		switch {
		case e.Name == "":
			bad("entry %d has no name", i)
		case names[e.Name]:
			bad("tensor %q appears twice", e.Name)
		}
		names[e.Name] = true
		if e.DType == "" {
			bad("tensor %q has no dtype", e.Name)
		}
		if e.Storage != "" {
			if n, ok := storageLen[e.Storage]; ok && n != e.Length {
				bad("tensor %q: storage %q is %d bytes, another tensor of it said %d", e.Name, e.Storage, e.Length, n)
			}
			storageLen[e.Storage] = e.Length
			continue
		}
		if want, ok := denseLength(e); ok && want != e.Length {
			bad("tensor %q: %s %v is %d bytes, the table says %d", e.Name, e.DType, e.Shape, want, e.Length)
		}
	}
	return errors.Join(errs...)
}

// denseLength is the byte length of a row-major tensor of a safetensors
// dtype; ok is false for another dtype or a shape whose size overflows.
func denseLength(e Entry) (uint64, bool) {
	d := safetensors.DType(e.DType)
	if !d.Valid() {
		return 0, false
	}
	n := uint64(d.Bits())
	for _, s := range e.Shape {
		hi, lo := bits.Mul64(n, s)
		if hi != 0 {
			return 0, false
		}
		n = lo
	}
	return (n + 7) / 8, true
}
