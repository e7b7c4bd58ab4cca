package client

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/wcache/wcache/core/cacheconfig"
)

// TestCheckpointPublicationCopiesTheFilesBytes: the table lists every
// tensor in checkpoint order with its dtype, shape and length, and Copy
// fills each entry with exactly the tensor's bytes.
func TestCheckpointPublicationCopiesTheFilesBytes(t *testing.T) {
	ck := holdCheckpoint(t).ck
	pub, src, err := OpenCheckpointPublication(context.Background(), ck, cacheconfig.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	n := 0
	for _, f := range ck.Files {
		n += len(f.Header.Tensors)
	}
	if len(pub.Tensors) != n {
		t.Fatalf("%d table entries for %d tensors", len(pub.Tensors), n)
	}
	i := 0
	for _, f := range ck.Files {
		file, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		for _, ht := range f.Header.Tensors {
			e := pub.Tensors[i]
			if e.Name != ht.Name || e.DType != string(ht.DType) || e.Length != ht.Len() {
				t.Fatalf("entry %d = %+v, want %s %s %d bytes (checkpoint order)", i, e, ht.Name, ht.DType, ht.Len())
			}
			dst := make([]byte, e.Length)
			if err := src.Copy(i, dst); err != nil {
				t.Fatal(err)
			}
			if want := file[f.Offset(ht) : f.Offset(ht)+int64(ht.Len())]; !bytes.Equal(dst, want) {
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
