package client

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk/filedigest"
)

// TestContentProvenInTheRecordsAlgorithm: a client proves its file in the
// algorithm of the daemon's record. A SHA256Tree record (an older daemon's,
// or an older client's publish) is proven by a SHA256Tree digest an older
// client cached (entry named by the identity alone) and, under "hash", by
// hashing in SHA-256; a BLAKE3Tree record by BLAKE3. A cached digest of the
// other algorithm proves nothing; other bytes are a mismatch in either.
func TestContentProvenInTheRecordsAlgorithm(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	data := make([]byte, 2*filedigest.LeafBytes+77)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	id := safetensors.StampOf(st)
	ctx := context.Background()
	// The daemon's record: another file (identity differs), same size.
	record := func(digest string) *Manifest {
		return &Manifest{Files: []cacheconfig.FileContent{{Name: "model.safetensors", Path: "/elsewhere/model.safetensors",
			Digest: digest, Identity: safetensors.Stamp{Dev: 1, Ino: 2, Size: id.Size}}}}
	}
	var unknown *cacheconfig.ContentUnknownError
	var mismatch *cacheconfig.ContentMismatchError
	for _, alg := range filedigest.Algorithms() {
		t.Run(string(alg), func(t *testing.T) {
			cache := &DigestCache{Dir: filepath.Join(t.TempDir(), "digests"), UID: os.Geteuid()}
			m := record(alg.Bytes(data))
			identity := ContentOptions{Policy: cacheconfig.PolicyIdentity, Cache: cache}
			hashed := 0
			hash := ContentOptions{Policy: cacheconfig.PolicyHash, Cache: cache, Progress: func(_ string, done, total int64) {
				if done == total {
					hashed++
				}
			}}
			// A cached digest of the other algorithm proves nothing.
			for _, other := range filedigest.Algorithms() {
				if other != alg {
					if err := cache.Store(id, other.Bytes(data)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := ProveContent(ctx, m, []string{path}, identity); !errors.As(err, &unknown) {
				t.Fatalf("identity with only the other algorithm cached: %v; want ContentUnknownError", err)
			}
			if err := ProveContent(ctx, m, []string{path}, hash); err != nil || hashed != 1 {
				t.Fatalf("hash: %v (hashed %d times, want 1)", err, hashed)
			}
			if d, ok := cache.Lookup(id, alg); !ok || d != m.Files[0].Digest {
				t.Fatalf("cached %q, %v after hashing; want %s", d, ok, m.Files[0].Digest)
			}
			if err := ProveContent(ctx, m, []string{path}, identity); err != nil {
				t.Fatalf("identity, warm cache: %v", err)
			}
			other := record(alg.Bytes(append([]byte{1}, data[1:]...)))
			if err := ProveContent(ctx, other, []string{path}, hash); !errors.As(err, &mismatch) {
				t.Fatalf("hash against other bytes: %v; want ContentMismatchError", err)
			}
		})
	}
	// An entry an older client wrote (SHA256Tree, named by the identity
	// alone) is found as such.
	cache := &DigestCache{Dir: filepath.Join(dir, "old"), UID: os.Geteuid()}
	if err := os.MkdirAll(cache.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old := filedigest.SHA256Tree.Bytes(data)
	if err := os.WriteFile(filepath.Join(cache.Dir, entryName(id, filedigest.SHA256Tree)), []byte(old+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ProveContent(ctx, record(old), []string{path}, ContentOptions{Policy: cacheconfig.PolicyIdentity, Cache: cache}); err != nil {
		t.Fatalf("identity, an older client's cache entry: %v", err)
	}
	if d, ok := cache.LookupAny(id); !ok || d != old {
		t.Fatalf("LookupAny = %q, %v; want %s", d, ok, old)
	}
	// A record of an algorithm this build does not know proves nothing.
	unknownAlg := record("md5-tree-1m:" + old[len("sha256-tree-1m:"):])
	if err := ProveContent(ctx, unknownAlg, []string{path}, ContentOptions{Policy: cacheconfig.PolicyHash, Cache: cache}); !errors.As(err, &unknown) {
		t.Fatalf("record of an unknown algorithm: %v; want ContentUnknownError", err)
	}
}
