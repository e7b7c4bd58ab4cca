package daemonv1

import (
	"errors"
	"slices"
	"testing"
)

func TestTensorTableRoundTrip(t *testing.T) {
	in := []*Tensor{
		{Name: "", Dtype: "F32", Shape: nil},
		{Name: "model.embed_tokens.weight", Dtype: "BF16", Shape: []uint64{32000, 4096}, HandleIndex: 0, Offset: 0, Length: 262144000},
		{Name: "model.layers.0.mlp.down_proj.weight", Dtype: "BF16", Shape: []uint64{4096, 11008}, HandleIndex: 1, Offset: 4096, Length: 90177536},
		{Name: "model.layers.0.mlp", Dtype: "U8", Shape: []uint64{1}, Offset: 7, Length: 1},
		{Name: "model.layers.0.mlp.up", Dtype: "F32", Shape: []uint64{}, Length: 4},
		{Name: "é", Dtype: "BF16", Shape: []uint64{0, 3}},
	}
	table, ok := NewTensorTable(in)
	if !ok {
		t.Fatal("no table")
	}
	if len(table.GetDtypes()) != 3 {
		t.Errorf("dtype dictionary %v", table.GetDtypes())
	}
	out, err := table.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("%d entries", len(out))
	}
	for i, e := range out {
		w := in[i]
		if e.Name != w.Name || e.Dtype != w.Dtype || !slices.Equal(e.Shape, w.Shape) || (len(w.Shape) == 0) != (e.Shape == nil) ||
			e.HandleIndex != w.HandleIndex || e.Offset != w.Offset || e.Length != w.Length {
			t.Errorf("entry %d = %+v, want %v", i, e, w)
		}
	}
	if _, ok := NewTensorTable([]*Tensor{{Name: "a", Layout: &TensorLayout{Storage: "s"}}}); ok {
		t.Error("a tensor with a layout went into a table")
	}
}

// TestTensorTableRefusesMalformed: every column mismatch a hostile or
// broken daemon could send is an ErrBadTensorTable, never a panic or a
// huge allocation.
func TestTensorTableRefusesMalformed(t *testing.T) {
	good := func() *TensorTable {
		tt, _ := NewTensorTable([]*Tensor{{Name: "ab", Dtype: "F32", Shape: []uint64{2}}, {Name: "ac", Dtype: "F32", Shape: []uint64{1, 1}}})
		return tt
	}
	for name, edit := range map[string]func(*TensorTable){
		"short column":         func(tt *TensorTable) { tt.Offset = tt.Offset[:1] },
		"shares beyond name":   func(tt *TensorTable) { tt.NameShared[1] = 3 },
		"first shares":         func(tt *TensorTable) { tt.NameShared[0] = 1 },
		"suffix bytes missing": func(tt *TensorTable) { tt.NameSuffixes = tt.NameSuffixes[:1] },
		"dims missing":         func(tt *TensorTable) { tt.Dims = tt.Dims[:2] },
		"dtype out of range":   func(tt *TensorTable) { tt.Dtype[1] = 5 },
		"huge names":           func(tt *TensorTable) { tt.NameShared[1], tt.NameSuffixLen[0] = 1<<31, 1<<31 },
	} {
		tt := good()
		edit(tt)
		if _, err := tt.Decode(); !errors.Is(err, ErrBadTensorTable) {
			t.Errorf("%s: Decode = %v, want ErrBadTensorTable", name, err)
		}
	}
}
