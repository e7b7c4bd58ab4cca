package daemon

import (
	"testing"

	"github.com/wcache/wcache/core/safetensors/safetensorstest"
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
			checkContentRecords(t, info.Content, f.model.Files)
			l := info.Load
			if hashed := l.Fill.Hash > 0; hashed != tc.hashed || (l.DigestLeavesFromFill > 0) != tc.hashed {
				t.Fatalf("the fill hashed %d of %d leaves in %v; want hashing %v", l.DigestLeavesFromFill, l.DigestLeaves, l.Fill.Hash, tc.hashed)
			}
			checkServesCheckpoint(t, f, r)
		})
	}
}
