package fill

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/core/daemon/daemontest/testworld"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
	"github.com/wcache/wcache/sdk/mock"
)

// TestCopiedDigestIsTheFilesDigest: the content digest copiedDigest
// computes from a loaded copy (whole leaves hashed by the backend, edges
// assembled from the header and reads) is each file's own digest, for
// plans that put a file's data in one arena, that split files across
// arenas (leaves crossing an arena's end), and with 2 MiB file alignment,
// hashed from the mapped exports and from bytes read through the backend;
// one byte changed in an arena changes the digest of the file it holds.
func TestCopiedDigestIsTheFilesDigest(t *testing.T) {
	m, err := safetensorstest.GenerateCheckpoint(filepath.Join(t.TempDir(), "big"), safetensorstest.GenOptions{Shards: 2, Layers: 2, HiddenSize: 512, IntermediateSize: 1536})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ck, err := plan.OpenCheckpoint(m.Dir, "", plan.ShardRanks{})
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]plan.Options{
		"default":            {},
		"3 MiB arenas":       {MaxArenaBytes: 3 << 20},
		"2 MiB file aligned": {FileAlignment: plan.HugePageAlignment, MaxArenaBytes: 5 << 20},
	} {
		t.Run(name, func(t *testing.T) {
			pl, err := plan.Build(ck, o)
			if err != nil {
				t.Fatal(err)
			}
			mem, err := mock.NewMemory(mock.MemoryOptions{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			b := mock.Wrap(mem)
			t.Cleanup(func() { _ = mem.Close() })
			var ids []sdk.AllocationID
			for _, a := range pl.Allocations {
				id, _, err := b.Allocate(ctx, 0, a.Bytes)
				if err == nil {
					err = b.Load(ctx, id, a.Extents, nil)
				}
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			if name != "default" && len(pl.Allocations) < 3 {
				t.Fatalf("%d arenas: the plan does not split the files", len(pl.Allocations))
			}
			// In each algorithm: the plugin's SHA-256 ranges (copiedDigest)
			// and the bytes hashed here (copyDigestIn of BLAKE3).
			for _, file := range ck.Files {
				for _, alg := range filedigest.Algorithms() {
					want, err := filedigest.File(ctx, file.Path, filedigest.Options{Algorithm: alg})
					if err != nil {
						t.Fatal(err)
					}
					if got, err := copyDigestIn(ctx, alg, b, file, pl, ids); err != nil || got != want {
						t.Errorf("%s: copyDigestIn(%s) = %s, %v; the file's digest is %s", file.Path, alg, got, err, want)
					}
					// The same bytes read through the backend, not mapped.
					if got, err := digestFromArenas(ctx, alg, file, pl, receivedBytes{arenas: backendReaders(ctx, b, ids)}); err != nil || got != want {
						t.Errorf("%s: digestFromArenas(%s) through the backend = %s, %v; the file's digest is %s", file.Path, alg, got, err, want)
					}
				}
			}
			// One byte of the last arena changed: the file it holds differs.
			last := len(ids) - 1
			h, err := b.Export(ctx, ids[last])
			if err != nil {
				t.Fatal(err)
			}
			testworld.Scribble(t, string(h.Data))
			for _, alg := range filedigest.Algorithms() {
				changed := 0
				for _, file := range ck.Files {
					want, _ := filedigest.File(ctx, file.Path, filedigest.Options{Algorithm: alg})
					if got, err := copyDigestIn(ctx, alg, b, file, pl, ids); err != nil || got != want {
						changed++
					}
				}
				if changed != 1 {
					t.Errorf("%s: %d files' digests changed with a write into arena %d, want 1", alg, changed, last+1)
				}
			}
		})
	}
}
