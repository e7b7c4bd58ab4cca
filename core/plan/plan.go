package plan

import (
	"fmt"

	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/internal/defaults"
	"github.com/wcache/wcache/sdk"
)

// Defaults and alignments of a plan.
const (
	// DefaultMaxArenaBytes is the largest allocation a plan asks for unless
	// Options say otherwise: 16 GiB.
	DefaultMaxArenaBytes uint64 = 16 << 30
	// DefaultFileAlignment aligns the start of every file's data region.
	DefaultFileAlignment uint64 = 4096
	// HugePageAlignment is the FileAlignment to use with 2 MiB huge pages.
	HugePageAlignment uint64 = 2 << 20
	// TensorAlignment aligns tensors loaded one by one (files whose tensors
	// are not naturally aligned).
	TensorAlignment uint64 = 256
)

// Options tune Build. The zero value is the default plan.
type Options struct {
	// MaxArenaBytes bounds each allocation (0: DefaultMaxArenaBytes). It
	// must be at least FileAlignment.
	MaxArenaBytes uint64
	// FileAlignment aligns each file's data region (0:
	// DefaultFileAlignment). A power of two, at least TensorAlignment.
	FileAlignment uint64
}

// withDefaults fills zero fields and checks the result.
func (o Options) withDefaults() (Options, error) {
	defaults.Zero(&o.MaxArenaBytes, DefaultMaxArenaBytes)
	defaults.Zero(&o.FileAlignment, DefaultFileAlignment)
	if o.FileAlignment < TensorAlignment || o.FileAlignment&(o.FileAlignment-1) != 0 {
		return o, fmt.Errorf("file alignment %d: must be a power of two >= %d: %w",
			o.FileAlignment, TensorAlignment, ErrInvalidOptions)
	}
	if o.MaxArenaBytes < o.FileAlignment {
		return o, fmt.Errorf("maximum arena size %d is smaller than the file alignment %d: %w",
			o.MaxArenaBytes, o.FileAlignment, ErrInvalidOptions)
	}
	return o, nil
}

// Tensor is the manifest entry of one tensor: where it lives once loaded.
type Tensor struct {
	Name  string
	DType string // safetensors spelling: "BF16", "F32", ...
	Shape []uint64
	// Handle is the index of the allocation (and of its exported handle).
	Handle uint32
	// Offset and Length are the tensor's byte range inside the allocation.
	Offset uint64
	Length uint64
}

// Allocation is one arena: its size and the extents that fill it.
type Allocation struct {
	// Bytes is the size to allocate: the end of the last extent rounded up
	// to the file alignment. At most MaxArenaBytes.
	Bytes uint64
	// Extents fill the allocation, in file order. They never overlap.
	Extents []sdk.Extent
}

// Plan is the outcome of Build.
type Plan struct {
	Allocations []Allocation
	// Tensors are in checkpoint order: files in order, then by offset in
	// the file.
	Tensors []Tensor
	// Bytes is the number of bytes loaded from files (the sum of every
	// extent's length); the allocations may be slightly larger (padding).
	Bytes uint64
	// Options are the options the plan was built with, defaults filled in.
	Options Options
}

// AllocatedBytes is the sum of every allocation's size.
func (p *Plan) AllocatedBytes() uint64 {
	var n uint64
	for _, a := range p.Allocations {
		n += a.Bytes
	}
	return n
}

// ArenaBytes is every allocation's size, in allocation order.
func (p *Plan) ArenaBytes() []uint64 {
	out := make([]uint64, len(p.Allocations))
	for i, a := range p.Allocations {
		out[i] = a.Bytes
	}
	return out
}

// ExtentCount is the number of extents over all allocations.
func (p *Plan) ExtentCount() int {
	n := 0
	for _, a := range p.Allocations {
		n += len(a.Extents)
	}
	return n
}

// Build plans ck (see the package documentation for the rules). It fails
// with ErrInvalidOptions, ErrEmpty or *TooLargeError; it reads no file.
func Build(ck *safetensors.Checkpoint, opts Options) (*Plan, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ntensors := 0
	for _, f := range ck.Files {
		ntensors += len(f.Header.Tensors)
	}
	b := &builder{opts: opts, plan: &Plan{Options: opts, Tensors: make([]Tensor, 0, ntensors)}}
	for _, f := range ck.Files {
		if naturallyAligned(f.Header) {
			err = b.addRuns(f)
		} else {
			err = b.addTensors(f)
		}
		if err != nil {
			return nil, err
		}
	}
	b.closeArena()
	if b.plan.Bytes == 0 {
		return nil, fmt.Errorf("checkpoint %s: %w", ck.Dir, ErrEmpty)
	}
	return b.plan, nil
}

// naturallyAligned reports whether every tensor of h begins at a multiple of
// its element size relative to the data start.
func naturallyAligned(h *safetensors.Header) bool {
	for _, t := range h.Tensors {
		if t.Begin%elementAlignment(t.DType) != 0 {
			return false
		}
	}
	return true
}

// elementAlignment is the natural alignment of a dtype in bytes: its element
// size, or 1 for sub-byte types.
func elementAlignment(d safetensors.DType) uint64 {
	bits := d.Bits()
	if bits < 8 || bits%8 != 0 {
		return 1
	}
	return uint64(bits / 8)
}

// alignUp rounds n up to a multiple of align (a power of two).
func alignUp(n, align uint64) uint64 {
	return (n + align - 1) &^ (align - 1)
}

// builder places extents into arenas, first fit in order.
type builder struct {
	opts Options
	plan *Plan
	// open is true while the last allocation accepts more extents; end is
	// its used length.
	open bool
	end  uint64
}

// closeArena fixes the size of the open arena.
func (b *builder) closeArena() {
	if !b.open {
		return
	}
	last := &b.plan.Allocations[len(b.plan.Allocations)-1]
	last.Bytes = min(alignUp(b.end, b.opts.FileAlignment), b.opts.MaxArenaBytes)
	b.open = false
}

// reserve finds room for length bytes at an offset congruent to phase
// modulo align, opening a new arena when the open one is too full. The
// caller has checked that phase+length fits an empty arena.
func (b *builder) reserve(length, align, phase uint64) (handle uint32, dest uint64) {
	if length == 0 && b.open {
		// An empty tensor (or a file of empty tensors) needs no room and no
		// alignment; opening an arena for it could leave an empty one.
		return uint32(len(b.plan.Allocations) - 1), b.end
	}
	if b.open {
		dest = alignUp(b.end, align) + phase
		if dest+length > b.opts.MaxArenaBytes {
			b.closeArena()
		}
	}
	if !b.open {
		b.plan.Allocations = append(b.plan.Allocations, Allocation{})
		b.open = true
		dest = phase
	}
	b.end = dest + length
	return uint32(len(b.plan.Allocations) - 1), dest
}

// addExtent appends an extent to the open arena.
func (b *builder) addExtent(path string, fileOffset, length, dest uint64) {
	if length == 0 {
		return
	}
	last := &b.plan.Allocations[len(b.plan.Allocations)-1]
	last.Extents = append(last.Extents, sdk.Extent{Path: path, FileOffset: fileOffset, Length: length, DestOffset: dest})
	b.plan.Bytes += length
}

// addTensor records a manifest entry.
func (b *builder) addTensor(t safetensors.TensorInfo, handle uint32, offset uint64) {
	b.plan.Tensors = append(b.plan.Tensors, Tensor{
		Name: t.Name, DType: string(t.DType), Shape: t.Shape,
		Handle: handle, Offset: offset, Length: t.Len(),
	})
}

// addRuns places a naturally aligned file as few extents as possible: one
// when its data region fits an arena, else runs of consecutive tensors.
func (b *builder) addRuns(f *safetensors.File) error {
	tensors := f.Header.Tensors
	max := b.opts.MaxArenaBytes
	align := b.opts.FileAlignment
	for i := 0; i < len(tensors); {
		// Grow the run [i, j) while it fits an empty arena at its phase.
		runBegin := tensors[i].Begin
		phase := runBegin % align
		j := i
		for j < len(tensors) && phase+tensors[j].End-runBegin <= max {
			j++
		}
		if j == i {
			return &TooLargeError{Path: f.Path, Tensor: tensors[i].Name, Bytes: tensors[i].Len(), MaxArenaBytes: max}
		}
		runEnd := tensors[j-1].End
		handle, dest := b.reserve(runEnd-runBegin, align, phase)
		b.addExtent(f.Path, uint64(f.DataStart)+runBegin, runEnd-runBegin, dest)
		for _, t := range tensors[i:j] {
			b.addTensor(t, handle, dest+t.Begin-runBegin)
		}
		i = j
	}
	return nil
}

// addTensors places a file tensor by tensor, each at a TensorAlignment
// boundary.
func (b *builder) addTensors(f *safetensors.File) error {
	for _, t := range f.Header.Tensors {
		if t.Len() > b.opts.MaxArenaBytes {
			return &TooLargeError{Path: f.Path, Tensor: t.Name, Bytes: t.Len(), MaxArenaBytes: b.opts.MaxArenaBytes}
		}
		handle, dest := b.reserve(t.Len(), TensorAlignment, 0)
		b.addExtent(f.Path, uint64(f.DataStart)+t.Begin, t.Len(), dest)
		b.addTensor(t, handle, dest)
	}
	return nil
}
