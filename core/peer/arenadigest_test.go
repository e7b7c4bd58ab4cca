package peer_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/sdk"
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
		path := filepath.Join(t.TempDir(), "arena")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		id, _, err := mem.Allocate(t.Context(), 0, uint64(size))
		if err != nil {
			t.Fatal(err)
		}
		if err := mem.Load(t.Context(), id, []sdk.Extent{{Path: path, Length: uint64(size)}}, nil); err != nil {
			t.Fatal(err)
		}
		got, err := peer.ArenaDigest(t.Context(), mem, id, uint64(size))
		if err != nil || got != filedigest.Bytes(data) {
			t.Fatalf("size %d: ArenaDigest %s (%v), want %s", size, got, err, filedigest.Bytes(data))
		}
		if err := mem.Free(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
}
