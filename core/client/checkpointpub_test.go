package client

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/sdk/filedigest"
)

// TestCheckpointPublicationCopiesTheFilesBytes: the table lists every
// tensor in checkpoint order with its dtype, shape and length, and Copy
// fills each entry with exactly the tensor's bytes.
func TestCheckpointPublicationCopiesTheFilesBytes(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
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

// TestCheckpointPublicationDigestsFromTheCache: the files' content comes
// from the per-user digest cache when it holds their identities (nothing
// hashed: a planted digest is what the publication carries), and a file
// hashed once is cached.
func TestCheckpointPublicationDigestsFromTheCache(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	ck := holdCheckpoint(t).ck
	cache, err := DefaultDigestCache()
	if err != nil {
		t.Fatal(err)
	}
	pub, src, err := OpenCheckpointPublication(context.Background(), ck, cacheconfig.Default())
	if err != nil {
		t.Fatal(err)
	}
	src.Close()
	for _, fc := range pub.Files {
		if d, ok := cache.Lookup(fc.Identity, filedigest.Default); !ok || d != fc.Digest {
			t.Errorf("%s: cached %q, %v after the publish, want %s", fc.Name, d, ok, fc.Digest)
		}
	}
	planted := filedigest.Default.Prefix() + strings.Repeat("ab", 32)
	if err := cache.Store(ck.Files[0].Stamp, planted); err != nil {
		t.Fatal(err)
	}
	pub, src, err = OpenCheckpointPublication(context.Background(), ck, cacheconfig.Default())
	if err != nil {
		t.Fatal(err)
	}
	src.Close()
	for _, fc := range pub.Files {
		if fc.Path == ck.Files[0].Path && fc.Digest != planted {
			t.Errorf("%s: digest %s, want the cached %s", fc.Name, fc.Digest, planted)
		}
	}
}
