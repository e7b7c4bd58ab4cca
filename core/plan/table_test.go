package plan

import (
	"errors"
	"strings"
	"testing"
)

func TestBuildTablePlacesInOrderAligned(t *testing.T) {
	p, err := BuildTable([]Entry{
		{Name: "a", DType: "F32", Shape: []uint64{3}, Length: 12},
		{Name: "b", DType: "BF16", Shape: []uint64{2, 5}, Length: 20},
		{Name: "c", DType: "F8_E4M3", Shape: []uint64{1}, Length: 1},
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ off, length uint64 }{{0, 12}, {256, 20}, {512, 1}}
	for i, w := range want {
		got := p.Tensors[i]
		if got.Handle != 0 || got.Offset != w.off || got.Length != w.length {
			t.Errorf("tensor %d = %+v, want offset %d length %d", i, got, w.off, w.length)
		}
	}
	if p.Tensors[1].Name != "b" || p.Tensors[1].DType != "BF16" || len(p.Tensors[1].Shape) != 2 {
		t.Errorf("tensor 1 = %+v", p.Tensors[1])
	}
	if len(p.Allocations) != 1 || p.Allocations[0].Bytes != 4096 || len(p.Allocations[0].Extents) != 0 {
		t.Errorf("allocations = %+v, want one of 4096 bytes without extents", p.Allocations)
	}
	if p.Bytes != 33 {
		t.Errorf("bytes = %d, want 33", p.Bytes)
	}
}

func TestBuildTableSharesStorages(t *testing.T) {
	p, err := BuildTable([]Entry{
		{Name: "qkv.q", DType: "F32", Shape: []uint64{4}, Length: 48, Storage: "s0"},
		{Name: "other", DType: "U8", Shape: []uint64{10}, Length: 10},
		{Name: "qkv.k", DType: "F32", Shape: []uint64{4}, Length: 48, Storage: "s0"},
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	q, o, k := p.Tensors[0], p.Tensors[1], p.Tensors[2]
	if q.Handle != k.Handle || q.Offset != k.Offset || q.Length != 48 || k.Length != 48 {
		t.Errorf("views of one storage placed apart: %+v and %+v", q, k)
	}
	if o.Offset == q.Offset {
		t.Errorf("a tensor of its own shares the storage's range: %+v", o)
	}
	if p.Bytes != 58 {
		t.Errorf("bytes = %d, want 58 (the storage counted once)", p.Bytes)
	}
}

func TestBuildTableSplitsArenas(t *testing.T) {
	p, err := BuildTable([]Entry{
		{Name: "a", DType: "U8", Shape: []uint64{3000}, Length: 3000},
		{Name: "b", DType: "U8", Shape: []uint64{3000}, Length: 3000},
	}, Options{MaxArenaBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Allocations) != 2 || p.Tensors[1].Handle != 1 || p.Tensors[1].Offset != 0 {
		t.Errorf("plan = %+v, want b at the start of a second arena", p)
	}
	_, err = BuildTable([]Entry{{Name: "big", DType: "U8", Shape: []uint64{5000}, Length: 5000}}, Options{MaxArenaBytes: 4096})
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Tensor != "big" {
		t.Errorf("too large = %v, want *TooLargeError naming big", err)
	}
}

func TestBuildTableRefusesBadTables(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []Entry
		want    string
	}{
		{"none", nil, "no tensor"},
		{"duplicate", []Entry{{Name: "a", DType: "U8", Shape: []uint64{1}, Length: 1}, {Name: "a", DType: "U8", Shape: []uint64{1}, Length: 1}}, `"a" appears twice`},
		{"no name", []Entry{{DType: "U8", Shape: []uint64{1}, Length: 1}}, "entry 0 has no name"},
		{"no dtype", []Entry{{Name: "a", Length: 1}}, `"a" has no dtype`},
		{"length", []Entry{{Name: "a", DType: "F32", Shape: []uint64{2}, Length: 4}}, "is 8 bytes, the table says 4"},
		{"storage sizes", []Entry{{Name: "a", DType: "F32", Length: 8, Storage: "s"}, {Name: "b", DType: "F32", Length: 16, Storage: "s"}}, `storage "s"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := BuildTable(tc.entries, Options{})
			if !errors.Is(err, ErrInvalidTable) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("BuildTable = %v, want ErrInvalidTable saying %q", err, tc.want)
			}
		})
	}
	// A dtype safetensors does not know is carried without a length check.
	if _, err := BuildTable([]Entry{{Name: "a", DType: "torch.uint2x4", Shape: []uint64{3}, Length: 1}}, Options{}); err != nil {
		t.Errorf("unknown dtype: %v", err)
	}
	if _, err := BuildTable([]Entry{{Name: "a", DType: "U8", Shape: []uint64{0}}}, Options{}); !errors.Is(err, ErrEmpty) {
		t.Errorf("zero bytes = %v, want ErrEmpty", err)
	}
}
