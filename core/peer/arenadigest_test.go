package peer_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/sdk/backendtest"
	"github.com/wcache/wcache/sdk/filedigest"
	"github.com/wcache/wcache/sdk/mock"
)

// TestArenaDigestThroughTheBackend loads bytes into a working backend and
// checks that the digest its Digest leaves give is the digest of the bytes,
// for sizes around leaf and batch edges.
func TestArenaDigestThroughTheBackend(t *testing.T) {
	mem, err := mock.NewMemory(mock.MemoryOptions{Memfd: true, Memory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	for _, size := range []int{1, 1<<20 - 1, 1 << 20, 5<<20 + 3} {
		data := content(size, byte(size))
		id := backendtest.LoadData(t, mem, uint64(size), data)
		got, err := peer.ArenaDigest(t.Context(), mem, id, uint64(size))
		// SHA256Tree: the backend contract's Digest is SHA-256.
		if want := filedigest.SHA256Tree.Bytes(data); err != nil || got != want {
			t.Fatalf("size %d: ArenaDigest %s (%v), want %s", size, got, err, want)
		}
		if err := mem.Free(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestArenaDigestFromTheBytes: the digest of a file holding the arena (a
// memfd: mapped) or of any ReaderAt (read) is the digest of its first size
// bytes, in either algorithm, whatever the workers; a short one is an
// error.
func TestArenaDigestFromTheBytes(t *testing.T) {
	for _, size := range []int{0, 1, 1<<20 - 1, 1 << 20, 5<<20 + 3} {
		data := content(size, byte(size))
		path := filepath.Join(t.TempDir(), "arena")
		if err := os.WriteFile(path, append(data, 1, 2, 3), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []io.ReaderAt{f, bytes.NewReader(append(data, 1, 2, 3))} {
			for _, alg := range filedigest.Algorithms() {
				for _, workers := range []int{0, 1, 3} {
					got, err := peer.ArenaDigestFrom(t.Context(), r, uint64(size), alg, workers)
					if want := alg.Bytes(data); err != nil || got != want {
						t.Fatalf("%T, size %d, %s, %d workers: %s (%v), want %s", r, size, alg, workers, got, err, want)
					}
				}
			}
			if _, err := peer.ArenaDigestFrom(t.Context(), r, uint64(size)+4, filedigest.Default, 2); err == nil {
				t.Fatalf("%T, size %d: a digest of 4 bytes more than it holds", r, size)
			}
		}
		f.Close()
	}
}
