package daemon

import (
	"os"
	"testing"

	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/sdk/filedigest"
)

// TestLoadTakesDigestsFromTheCache: a load of files whose digests the
// daemon's digest cache holds (a restart) asks the plugin for no leaves and
// records the cache's digests, which are the files'; with one file missing
// from the cache the fill hashes again.
func TestLoadTakesDigestsFromTheCache(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cached func(files []string) []string
		hashed bool
	}{
		{name: "every file cached", cached: func(files []string) []string { return files }},
		{name: "one file not cached", cached: func(files []string) []string { return files[1:] }, hashed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.model = f.generate("big", safetensorstest.GenOptions{Shards: 2, HiddenSize: 512})
			f.fillStats = true
			cache := cachedDigests(t, tc.cached(f.model.Files)...)
			r := f.start(0, func(o *Options) { o.DigestCache, o.PeerFill = cache, PeerFillOff })
			info := r.d.Info()
			if len(info.Content) != len(f.model.Files) {
				t.Fatalf("%d content records for %d files", len(info.Content), len(f.model.Files))
			}
			for i, c := range info.Content {
				b, err := os.ReadFile(f.model.Files[i])
				if err != nil {
					t.Fatal(err)
				}
				st, _ := os.Stat(f.model.Files[i])
				if c.Digest != filedigest.Bytes(b) || c.Identity != safetensors.StampOf(st) {
					t.Fatalf("record %d = %+v; want the digest %s and identity of %s", i, c, filedigest.Bytes(b), f.model.Files[i])
				}
			}
			l := info.Load
			if hashed := l.Fill.Hash > 0; hashed != tc.hashed || (l.DigestLeavesFromFill > 0) != tc.hashed {
				t.Fatalf("the fill hashed %d of %d leaves in %v; want hashing %v", l.DigestLeavesFromFill, l.DigestLeaves, l.Fill.Hash, tc.hashed)
			}
			checkServesCheckpoint(t, f, r)
		})
	}
}
