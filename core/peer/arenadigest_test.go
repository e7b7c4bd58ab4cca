package peer_test

import (
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
