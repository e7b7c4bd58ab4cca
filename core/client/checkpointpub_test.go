package client

import (
	"bytes"
	"testing"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// TestCheckpointPublicationCopiesTheFilesBytes: the table lists every
// tensor in checkpoint order with its dtype, shape and length, and Copy
// fills each entry with exactly the tensor's bytes.
func TestCheckpointPublicationCopiesTheFilesBytes(t *testing.T) {
	dir := t.TempDir()
	gen, err := safetensorstest.GenerateCheckpoint(dir, safetensorstest.GenOptions{Layers: 1, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	pub, src, err := OpenCheckpointPublication(ck, cacheconfig.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	want := map[string][]byte{}
	for _, g := range gen.Tensors {
		want[g.Name] = g.Data()
	}
	if len(pub.Tensors) != len(gen.Tensors) {
		t.Fatalf("%d table entries for %d tensors", len(pub.Tensors), len(gen.Tensors))
	}
	i := 0
	for _, f := range ck.Files {
		for _, ht := range f.Header.Tensors {
			e := pub.Tensors[i]
			if e.Name != ht.Name || e.DType != string(ht.DType) || e.Length != ht.Len() {
				t.Fatalf("entry %d = %+v, want %s %s %d bytes (checkpoint order)", i, e, ht.Name, ht.DType, ht.Len())
			}
			dst := make([]byte, e.Length)
			if err := src.Copy(i, dst); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst, want[e.Name]) {
				t.Fatalf("entry %d (%s): bytes differ from the file's", i, e.Name)
			}
			i++
		}
	}
	if err := src.Copy(0, make([]byte, pub.Tensors[0].Length+1)); err == nil {
		t.Fatal("Copy into a buffer of the wrong size succeeded")
	}
	if err := src.Copy(len(pub.Tensors), nil); err == nil {
		t.Fatal("Copy of an entry past the table succeeded")
	}
}
