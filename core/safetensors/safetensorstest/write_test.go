package safetensorstest_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

func TestWriteFileLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.safetensors")
	tensors := []safetensorstest.Tensor{
		{Name: "u8", DType: safetensors.U8, Shape: []uint64{3}, Data: []byte{1, 2, 3}},
		{Name: "f32_b", DType: safetensors.F32, Shape: []uint64{1}, Data: []byte{4, 5, 6, 7}},
		{Name: "bf", DType: safetensors.BF16, Shape: []uint64{2}, Data: []byte{8, 9, 10, 11}},
		{Name: "f32_a", DType: safetensors.F32, Shape: []uint64{1, 1}, Data: []byte{12, 13, 14, 15}},
		{Name: "scalar", DType: safetensors.F64, Shape: []uint64{}, Data: []byte{16, 17, 18, 19, 20, 21, 22, 23}},
	}
	if err := safetensorstest.WriteFile(path, tensors); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, ti := range f.Header.Tensors {
		order = append(order, ti.Name)
	}
	// Decreasing dtype rank (alignment), then name, as the reference writer.
	if want := []string{"scalar", "f32_a", "f32_b", "bf", "u8"}; !slices.Equal(order, want) {
		t.Fatalf("order = %v, want %v", order, want)
	}
	if f.Header.Size%8 != 0 || f.Header.Metadata != nil {
		t.Fatalf("header size %d (want a multiple of 8), metadata %v", f.Header.Size, f.Header.Metadata)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tensors {
		ti, _ := f.Tensor(tt.Name)
		if got := file[f.Offset(ti) : f.Offset(ti)+int64(ti.Len())]; !bytes.Equal(got, tt.Data) {
			t.Errorf("%s: bytes %v, want %v", tt.Name, got, tt.Data)
		}
		if ti.Begin%uint64(max(ti.DType.Bits()/8, 1)) != 0 {
			t.Errorf("%s at %d is not naturally aligned", tt.Name, ti.Begin)
		}
	}
	if !strings.HasSuffix(string(f.RawHeader), "}") && !strings.HasSuffix(string(f.RawHeader), " ") {
		t.Fatalf("header %q not padded with spaces", f.RawHeader)
	}
}

func TestEncodeRefuses(t *testing.T) {
	cases := map[string][]safetensorstest.Tensor{
		"short data":     {{Name: "a", DType: safetensors.F32, Shape: []uint64{2}, Data: make([]byte, 7)}},
		"duplicate name": {{Name: "a", DType: safetensors.U8, Shape: []uint64{1}, Data: []byte{1}}, {Name: "a", DType: safetensors.I8, Shape: []uint64{1}, Data: []byte{1}}},
		"unknown dtype":  {{Name: "a", DType: "F128", Shape: []uint64{1}, Data: make([]byte, 16)}},
		"misaligned":     {{Name: "a", DType: safetensors.F4, Shape: []uint64{1}}},
		"empty name":     {{Name: "", DType: safetensors.U8, Shape: []uint64{1}, Data: []byte{1}}},
		"metadata name":  {{Name: "__metadata__", DType: safetensors.U8, Shape: []uint64{1}, Data: []byte{1}}},
	}
	for name, tensors := range cases {
		if err := safetensorstest.Encode(&bytes.Buffer{}, tensors, nil); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

func TestLayoutMetadataAndEscaping(t *testing.T) {
	prefix, infos, err := safetensorstest.Layout([]safetensorstest.Tensor{
		{Name: `we"ird\name`, DType: safetensors.U8, Shape: []uint64{2}},
	}, map[string]string{"b": "2", "a": "é"})
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(prefix)
	if uint64(len(prefix)) != 8+n || len(prefix)%8 != 0 {
		t.Fatalf("prefix of %d bytes claims %d", len(prefix), n)
	}
	file := append(slices.Clone(prefix), 0, 0)
	h, _, err := safetensors.ParseHeader(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	if h.Tensors[0].Name != `we"ird\name` || h.Metadata["a"] != "é" || infos[0].End != 2 {
		t.Fatalf("header = %+v, infos %+v", h, infos)
	}
	if !strings.HasPrefix(string(prefix[8:]), `{"__metadata__":{"a":"é","b":"2"},`) {
		t.Fatalf("header %q does not start with sorted metadata", prefix[8:])
	}
}

func TestRawFile(t *testing.T) {
	got := safetensorstest.RawFile("{}", []byte{9})
	want := []byte{2, 0, 0, 0, 0, 0, 0, 0, '{', '}', 9}
	if !bytes.Equal(got, want) {
		t.Fatalf("RawFile = %v, want %v", got, want)
	}
}

func TestStreamIsChunkingInvariant(t *testing.T) {
	whole := safetensorstest.StreamBytes(42, 1000)
	s := safetensorstest.NewStream(42)
	var pieces []byte
	for _, n := range []int{1, 3, 8, 5, 0, 16, 7, 960} {
		p := make([]byte, n)
		if got, err := s.Read(p); got != n || err != nil {
			t.Fatalf("Read(%d) = %d, %v", n, got, err)
		}
		pieces = append(pieces, p...)
	}
	if !bytes.Equal(pieces, whole) {
		t.Fatal("bytes depend on how reads are split")
	}
	if bytes.Equal(safetensorstest.StreamBytes(43, 64), whole[:64]) {
		t.Fatal("two seeds give the same bytes")
	}
	if bytes.Equal(safetensorstest.StreamBytes(0, 64), make([]byte, 64)) {
		t.Fatal("seed 0 gives zeros")
	}
}
