package safetensors_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.safetensors")
	data := bytes.Repeat([]byte{1, 2, 3, 4}, 6)
	err := safetensorstest.WriteFileMetadata(path, []safetensorstest.Tensor{
		{Name: "small", DType: safetensors.U8, Shape: []uint64{8}, Data: data[:8]},
		{Name: "big", DType: safetensors.F32, Shape: []uint64{2, 2}, Data: data[8:]},
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	f, file := safetensorstest.Load(t, path)
	if f.Path != path || f.Size != int64(len(file)) || f.DataStart != int64(8+f.Header.Size) || f.DataStart%8 != 0 {
		t.Fatalf("File = %+v (file %d bytes)", f, len(file))
	}
	if !bytes.Equal(f.RawHeader, file[8:f.DataStart]) {
		t.Fatal("RawHeader differs from the stored header bytes")
	}
	if f.Header.Metadata["format"] != "pt" {
		t.Fatalf("metadata = %v", f.Header.Metadata)
	}
	big, ok := f.Tensor("big")
	if !ok || big.Begin != 0 || big.Len() != 16 {
		t.Fatalf("big = %+v, %v; the F32 tensor must come first", big, ok)
	}
	small, _ := f.Tensor("small")
	if !bytes.Equal(file[f.Offset(small):f.Offset(small)+int64(small.Len())], data[:8]) {
		t.Fatal("Offset does not locate the tensor bytes")
	}
	if _, ok := f.Tensor("absent"); ok {
		t.Fatal("found an absent tensor")
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := safetensors.Open(filepath.Join(dir, "missing.safetensors")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: err = %v, want fs.ErrNotExist", err)
	}
	if _, err := safetensors.Open(dir); err == nil {
		t.Fatal("opened a directory")
	}
	bad := filepath.Join(dir, "bad.safetensors")
	if err := os.WriteFile(bad, safetensorstest.RawFile(`{}`, []byte{0}), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := safetensors.Open(bad)
	var fe *safetensors.FormatError
	if !errors.As(err, &fe) || fe.Path != bad || !errors.Is(err, safetensors.ErrIncompleteBuffer) {
		t.Fatalf("err = %v, want a *FormatError for %s wrapping ErrIncompleteBuffer", err, bad)
	}
}
