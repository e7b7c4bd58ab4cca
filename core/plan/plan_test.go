package plan

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/wcache/wcache/core/safetensors"
)

// tspec is a tensor of a synthetic file: dtype and element count.
type tspec struct {
	name  string
	dtype safetensors.DType
	elems uint64
}

// synthFile lays tensors out back to back from offset 0, in the given order,
// as a safetensors file whose data starts at dataStart.
func synthFile(path string, dataStart int64, specs ...tspec) *safetensors.File {
	h := &safetensors.Header{Size: uint64(dataStart - 8)}
	var off uint64
	for _, s := range specs {
		n := s.elems * uint64(s.dtype.Bits()) / 8
		h.Tensors = append(h.Tensors, safetensors.TensorInfo{Name: s.name, DType: s.dtype,
			Shape: []uint64{s.elems}, Begin: off, End: off + n})
		off += n
	}
	return &safetensors.File{Path: path, Size: dataStart + int64(off), DataStart: dataStart, Header: h}
}

func checkpointOf(files ...*safetensors.File) *safetensors.Checkpoint {
	return &safetensors.Checkpoint{Dir: "/models/m", Files: files}
}

func TestBuildOneExtentPerAlignedFile(t *testing.T) {
	f1 := synthFile("/m/a.safetensors", 136,
		tspec{"a.w", safetensors.F32, 1000}, tspec{"a.b", safetensors.BF16, 3}, tspec{"a.c", safetensors.U8, 5})
	f2 := synthFile("/m/b.safetensors", 96, tspec{"b.w", safetensors.F64, 7})
	p, err := Build(checkpointOf(f1, f2), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Allocations) != 1 {
		t.Fatalf("allocations = %d, want 1", len(p.Allocations))
	}
	ext := p.Allocations[0].Extents
	if len(ext) != 2 {
		t.Fatalf("extents = %+v, want one per file", ext)
	}
	if ext[0].Path != f1.Path || ext[0].FileOffset != 136 || ext[0].Length != 4011 || ext[0].DestOffset != 0 {
		t.Errorf("extent 0 = %+v", ext[0])
	}
	if ext[1].Path != f2.Path || ext[1].FileOffset != 96 || ext[1].Length != 56 || ext[1].DestOffset != 4096 {
		t.Errorf("extent 1 = %+v", ext[1])
	}
	if got := p.Allocations[0].Bytes; got != 8192 {
		t.Errorf("allocation bytes = %d, want 8192", got)
	}
	if p.Bytes != 4011+56 {
		t.Errorf("plan bytes = %d", p.Bytes)
	}
	want := []Tensor{
		{Name: "a.w", DType: "F32", Offset: 0, Length: 4000},
		{Name: "a.b", DType: "BF16", Offset: 4000, Length: 6},
		{Name: "a.c", DType: "U8", Offset: 4006, Length: 5},
		{Name: "b.w", DType: "F64", Offset: 4096, Length: 56},
	}
	if len(p.Tensors) != len(want) {
		t.Fatalf("tensors = %+v", p.Tensors)
	}
	for i, w := range want {
		g := p.Tensors[i]
		if g.Name != w.Name || g.DType != w.DType || g.Handle != 0 || g.Offset != w.Offset || g.Length != w.Length {
			t.Errorf("tensor %d = %+v, want %+v", i, g, w)
		}
	}
	checkInvariants(t, checkpointOf(f1, f2), p)
}

func TestBuildOpensNewArenaAtLimit(t *testing.T) {
	mk := func(name string) *safetensors.File {
		return synthFile("/m/"+name, 64, tspec{name, safetensors.F32, 1536}) // 6 KiB
	}
	ck := checkpointOf(mk("1"), mk("2"), mk("3"))
	p, err := Build(ck, Options{MaxArenaBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Allocations) != 2 {
		t.Fatalf("allocations = %+v, want 2", p.Allocations)
	}
	if got := p.Allocations[0]; got.Bytes != 16<<10 || len(got.Extents) != 2 || got.Extents[1].DestOffset != 8192 {
		t.Errorf("arena 0 = %+v", got)
	}
	if got := p.Allocations[1]; got.Bytes != 8192 || len(got.Extents) != 1 || got.Extents[0].DestOffset != 0 {
		t.Errorf("arena 1 = %+v", got)
	}
	if p.Tensors[2].Handle != 1 || p.Tensors[2].Offset != 0 {
		t.Errorf("third tensor = %+v, want handle 1 offset 0", p.Tensors[2])
	}
	checkInvariants(t, ck, p)
}

func TestBuildMisalignedFileLoadsPerTensor(t *testing.T) {
	// A U8 tensor of 3 bytes first puts the F32 tensor at offset 3.
	f := synthFile("/m/odd.safetensors", 80,
		tspec{"x", safetensors.U8, 3}, tspec{"y", safetensors.F32, 10}, tspec{"z", safetensors.BF16, 1})
	ck := checkpointOf(f)
	p, err := Build(ck, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ext := p.Allocations[0].Extents
	if len(ext) != 3 {
		t.Fatalf("extents = %+v, want one per tensor", ext)
	}
	for i, tn := range p.Tensors {
		if tn.Offset%TensorAlignment != 0 {
			t.Errorf("tensor %s at %d, not %d-aligned", tn.Name, tn.Offset, TensorAlignment)
		}
		if ext[i].FileOffset != uint64(f.DataStart)+f.Header.Tensors[i].Begin {
			t.Errorf("extent %d file offset %d", i, ext[i].FileOffset)
		}
	}
	if p.Tensors[1].Offset != 256 || p.Tensors[2].Offset != 512 {
		t.Errorf("offsets = %d, %d; want 256, 512", p.Tensors[1].Offset, p.Tensors[2].Offset)
	}
	checkInvariants(t, ck, p)
}

func TestBuildSplitsFileLargerThanArena(t *testing.T) {
	// 5 tensors of 3000 F32 (12000 bytes) and a 2-byte one in between to
	// shift phases; the arena holds 32 KiB.
	f := synthFile("/m/big.safetensors", 104,
		tspec{"t0", safetensors.F32, 3000}, tspec{"t1", safetensors.F32, 3000},
		tspec{"h", safetensors.F16, 2}, tspec{"t2", safetensors.F16, 6000},
		tspec{"t3", safetensors.F32, 3000}, tspec{"t4", safetensors.F32, 3000})
	ck := checkpointOf(f)
	p, err := Build(ck, Options{MaxArenaBytes: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Allocations) < 2 {
		t.Fatalf("allocations = %d, want the file split", len(p.Allocations))
	}
	if p.ExtentCount() >= len(p.Tensors) {
		t.Errorf("%d extents for %d tensors: runs should group tensors", p.ExtentCount(), len(p.Tensors))
	}
	for _, tn := range p.Tensors {
		in, _ := f.Tensor(tn.Name)
		if tn.Offset%DefaultFileAlignment != in.Begin%DefaultFileAlignment {
			t.Errorf("tensor %s lost its phase: offset %d, begin %d", tn.Name, tn.Offset, in.Begin)
		}
	}
	checkInvariants(t, ck, p)
}

func TestBuildTensorLargerThanArena(t *testing.T) {
	for _, f := range []*safetensors.File{
		synthFile("/m/a.safetensors", 64, tspec{"small", safetensors.F32, 2}, tspec{"huge", safetensors.F32, 5000}),
		synthFile("/m/b.safetensors", 64, tspec{"odd", safetensors.U8, 1}, tspec{"huge", safetensors.F32, 5000}),
	} {
		_, err := Build(checkpointOf(f), Options{MaxArenaBytes: 16 << 10})
		var tl *TooLargeError
		if !errors.As(err, &tl) {
			t.Fatalf("%s: err = %v, want *TooLargeError", f.Path, err)
		}
		if tl.Tensor != "huge" || tl.Bytes != 20000 || tl.MaxArenaBytes != 16<<10 || tl.Path != f.Path {
			t.Errorf("%s: error = %+v", f.Path, tl)
		}
	}
}

func TestBuildEmpty(t *testing.T) {
	f := synthFile("/m/e.safetensors", 64, tspec{"nothing", safetensors.F32, 0})
	if _, err := Build(checkpointOf(f), Options{}); !errors.Is(err, ErrEmpty) {
		t.Fatalf("err = %v, want ErrEmpty", err)
	}
	if _, err := Build(checkpointOf(), Options{}); !errors.Is(err, ErrEmpty) {
		t.Fatalf("no files: err = %v, want ErrEmpty", err)
	}
}

func TestBuildEmptyTensorsGetValidHandles(t *testing.T) {
	ck := checkpointOf(
		synthFile("/m/a.safetensors", 64, tspec{"e0", safetensors.F32, 0}),
		synthFile("/m/b.safetensors", 64, tspec{"w", safetensors.F32, 4}, tspec{"e1", safetensors.BF16, 0}),
	)
	p, err := Build(ck, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Allocations) != 1 {
		t.Fatalf("allocations = %+v", p.Allocations)
	}
	checkInvariants(t, ck, p)
}

func TestBuildInvalidOptions(t *testing.T) {
	ck := checkpointOf(synthFile("/m/a.safetensors", 64, tspec{"w", safetensors.F32, 4}))
	for _, o := range []Options{
		{FileAlignment: 3000},
		{FileAlignment: 128},
		{MaxArenaBytes: 1000},
		{MaxArenaBytes: 1 << 20, FileAlignment: HugePageAlignment},
	} {
		if _, err := Build(ck, o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: err = %v, want ErrInvalidOptions", o, err)
		}
	}
}

func TestBuildHugePageAlignment(t *testing.T) {
	ck := checkpointOf(
		synthFile("/m/a.safetensors", 64, tspec{"a", safetensors.F32, 100}),
		synthFile("/m/b.safetensors", 64, tspec{"b", safetensors.F32, 100}),
	)
	p, err := Build(ck, Options{FileAlignment: HugePageAlignment})
	if err != nil {
		t.Fatal(err)
	}
	ext := p.Allocations[0].Extents
	if ext[1].DestOffset != HugePageAlignment || p.Allocations[0].Bytes != 2*HugePageAlignment {
		t.Errorf("extents %+v bytes %d", ext, p.Allocations[0].Bytes)
	}
	checkInvariants(t, ck, p)
}

// TestBuildAllocationsIndependentOfTensorCount is the reason for arenas:
// thousands of tensors still make one allocation and one extent per file.
func TestBuildAllocationsIndependentOfTensorCount(t *testing.T) {
	ck := manyTensors(3000, 4)
	p, err := Build(ck, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Allocations) != 1 || p.ExtentCount() != 4 || len(p.Tensors) != 3000 {
		t.Fatalf("allocations %d, extents %d, tensors %d", len(p.Allocations), p.ExtentCount(), len(p.Tensors))
	}
	checkInvariants(t, ck, p)
}

// TestBuildRandomInvariants plans random checkpoints under random limits and
// checks every invariant a loader and a client rely on.
func TestBuildRandomInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dtypes := []safetensors.DType{safetensors.U8, safetensors.BF16, safetensors.F32, safetensors.F64, safetensors.F4}
	for iter := 0; iter < 300; iter++ {
		var files []*safetensors.File
		for fi := 0; fi < 1+rng.IntN(4); fi++ {
			var specs []tspec
			for ti := 0; ti < rng.IntN(12); ti++ {
				d := dtypes[rng.IntN(len(dtypes))]
				n := uint64(rng.IntN(3000))
				if d == safetensors.F4 {
					n &^= 1
				}
				specs = append(specs, tspec{fmt.Sprintf("f%d.t%d", fi, ti), d, n})
			}
			files = append(files, synthFile(fmt.Sprintf("/m/%d.safetensors", fi), 8+8*int64(1+rng.IntN(50)), specs...))
		}
		ck := checkpointOf(files...)
		opts := Options{MaxArenaBytes: uint64(24000 + rng.IntN(40000))}
		if rng.IntN(2) == 0 {
			opts.FileAlignment = 1024
		}
		p, err := Build(ck, opts)
		var tl *TooLargeError
		switch {
		case errors.Is(err, ErrEmpty), errors.As(err, &tl):
			continue
		case err != nil:
			t.Fatalf("iteration %d: %v", iter, err)
		}
		checkInvariants(t, ck, p)
	}
}

// checkInvariants verifies a plan against its checkpoint: every tensor is
// listed once, lies inside its allocation, is covered by exactly the extent
// that carries its file bytes, and is naturally aligned; extents do not
// overlap and stay inside allocations no larger than the limit.
func checkInvariants(t *testing.T, ck *safetensors.Checkpoint, p *Plan) {
	t.Helper()
	var total uint64
	for ai, a := range p.Allocations {
		if a.Bytes == 0 || a.Bytes > p.Options.MaxArenaBytes {
			t.Errorf("allocation %d has %d bytes (limit %d)", ai, a.Bytes, p.Options.MaxArenaBytes)
		}
		var prevEnd uint64
		for ei, e := range a.Extents {
			if e.Length == 0 {
				t.Errorf("allocation %d extent %d is empty", ai, ei)
			}
			if e.DestOffset < prevEnd {
				t.Errorf("allocation %d extent %d overlaps the previous one", ai, ei)
			}
			prevEnd = e.DestOffset + e.Length
			if prevEnd > a.Bytes {
				t.Errorf("allocation %d extent %d ends at %d past %d", ai, ei, prevEnd, a.Bytes)
			}
			total += e.Length
		}
	}
	if total != p.Bytes || total != ck.TotalBytes() {
		t.Errorf("extent bytes %d, plan bytes %d, checkpoint bytes %d", total, p.Bytes, ck.TotalBytes())
	}
	byName := map[string]Tensor{}
	for _, tn := range p.Tensors {
		if _, dup := byName[tn.Name]; dup {
			t.Errorf("tensor %s listed twice", tn.Name)
		}
		byName[tn.Name] = tn
	}
	if len(byName) != ck.NumTensors() {
		t.Errorf("plan lists %d tensors, checkpoint has %d", len(byName), ck.NumTensors())
	}
	for _, f := range ck.Files {
		for _, in := range f.Header.Tensors {
			tn, ok := byName[in.Name]
			if !ok {
				t.Errorf("tensor %s missing", in.Name)
				continue
			}
			if int(tn.Handle) >= len(p.Allocations) {
				t.Errorf("tensor %s handle %d of %d", in.Name, tn.Handle, len(p.Allocations))
				continue
			}
			a := p.Allocations[tn.Handle]
			if tn.Length != in.Len() || tn.Offset+tn.Length > a.Bytes {
				t.Errorf("tensor %s = %+v outside allocation of %d", in.Name, tn, a.Bytes)
			}
			if tn.Offset%elementAlignment(in.DType) != 0 {
				t.Errorf("tensor %s (%s) at unaligned offset %d", in.Name, in.DType, tn.Offset)
			}
			if in.Len() == 0 {
				continue
			}
			src := uint64(f.DataStart) + in.Begin
			covered := false
			for _, e := range a.Extents {
				if e.Path == f.Path && src >= e.FileOffset && src+in.Len() <= e.FileOffset+e.Length {
					covered = src-e.FileOffset == tn.Offset-e.DestOffset
				}
			}
			if !covered {
				t.Errorf("tensor %s at %d is not loaded from its file bytes", in.Name, tn.Offset)
			}
		}
	}
}

// manyTensors is a naturally aligned checkpoint of n tensors over files.
func manyTensors(n, files int) *safetensors.Checkpoint {
	var out []*safetensors.File
	per := n / files
	for fi := 0; fi < files; fi++ {
		count := per
		if fi == files-1 {
			count = n - per*(files-1)
		}
		specs := make([]tspec, count)
		for i := range specs {
			specs[i] = tspec{fmt.Sprintf("model.layers.%d.mlp.w%d.weight", fi, i), safetensors.BF16, 4096}
		}
		out = append(out, synthFile(fmt.Sprintf("/m/model-%05d.safetensors", fi), 1<<16, specs...))
	}
	return checkpointOf(out...)
}

func BenchmarkBuild3000Tensors(b *testing.B) {
	ck := manyTensors(3000, 4)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(ck, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
