package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/sdk/filedigest"
)

// copyModel copies the checkpoint m to dir (safetensorstest.CopyCheckpoint:
// modification times kept) and returns the copies of its files.
func copyModel(t *testing.T, m *safetensorstest.Result, dir string) []string {
	t.Helper()
	safetensorstest.CopyCheckpoint(t, m.Dir, dir)
	var out []string
	for _, f := range m.Files {
		out = append(out, filepath.Join(dir, filepath.Base(f)))
	}
	return out
}

// zeroFirstTensor zeroes the bytes of the first tensor of path in place.
func zeroFirstTensor(t *testing.T, path string) {
	t.Helper()
	if _, err := safetensorstest.ZeroTensor(path, 0); err != nil {
		t.Fatal(err)
	}
}

type hashCounter struct{ files map[string]int }

func (h *hashCounter) opts(policy cacheconfig.Policy, cache *client.DigestCache) client.ContentOptions {
	return client.ContentOptions{Policy: policy, Cache: cache, Progress: func(name string, done, total int64) {
		if done == total {
			h.files[name]++
		}
	}}
}

func TestContentDigestsRecordedAndProven(t *testing.T) {
	f := newFixture(t)
	// Files of several leaves each, so that the fill hashes most of them.
	f.model = f.generate("big", safetensorstest.GenOptions{Shards: 2, HiddenSize: 512})
	f.fillStats = true
	r := f.start(0, nil)
	info := r.d.Info()
	checkContentRecords(t, info.Content, f.model.Files)
	// The fill hashed every leaf but those holding a header or an arena's
	// edge.
	if l := info.Load; l.DigestLeavesFromFill == 0 || l.DigestLeaves-l.DigestLeavesFromFill > int64(len(info.Content)+2*l.Allocations) {
		t.Fatalf("%d of %d leaves hashed by the fill (%d files, %d arenas)", l.DigestLeavesFromFill, l.DigestLeaves, len(info.Content), l.Allocations)
	}
	t.Logf("%d of %d leaves hashed by the fill (%d files, %d arenas)", info.Load.DigestLeavesFromFill, info.Load.DigestLeaves, len(info.Content), info.Load.Allocations)
	a := r.mustAttach(t)
	if len(a.Manifest.Files) != len(info.Content) || a.Manifest.Files[0] != info.Content[0] {
		t.Fatalf("manifest files %+v, want %+v", a.Manifest.Files, info.Content)
	}
	st, err := r.dial(t).Status(context.Background())
	if err != nil || len(st.Files) != len(info.Content) || st.Files[1] != info.Content[1] {
		t.Fatalf("status files %+v (%v), want %+v", st.Files, err, info.Content)
	}
	ctx := context.Background()
	cache := &client.DigestCache{Dir: filepath.Join(f.dir, "digests"), UID: os.Geteuid()}
	h := &hashCounter{files: map[string]int{}}
	m := a.Manifest

	// The very files the daemon loaded: proven by identity, nothing hashed.
	for _, p := range []cacheconfig.Policy{cacheconfig.PolicyIdentity, cacheconfig.PolicyHash} {
		if err := client.ProveContent(ctx, m, f.model.Files, h.opts(p, cache)); err != nil {
			t.Fatalf("%s, the daemon's own files: %v", p, err)
		}
	}
	if len(h.files) != 0 {
		t.Fatalf("files hashed although their identity matched: %v", h.files)
	}

	// A copy with one tensor zeroed (same headers): refused.
	zeroed := copyModel(t, f.model, filepath.Join(f.dir, "m2"))
	zeroFirstTensor(t, zeroed[1])
	var unknown *cacheconfig.ContentUnknownError
	if err := client.ProveContent(ctx, m, zeroed, h.opts(cacheconfig.PolicyIdentity, cache)); !errors.As(err, &unknown) {
		t.Fatalf("identity, zeroed copy: %v; want a ContentUnknownError (load from disk)", err)
	}
	var mismatch *cacheconfig.ContentMismatchError
	err = client.ProveContent(ctx, m, zeroed, h.opts(cacheconfig.PolicyHash, cache))
	if !errors.As(err, &mismatch) || mismatch.Name != filepath.Base(zeroed[1]) || mismatch.ClientPath != zeroed[1] {
		t.Fatalf("hash, zeroed copy: %v; want a ContentMismatchError naming %s", err, zeroed[1])
	}
	// Headers only: the documented hole, allowed only where the daemon says so.
	if err := client.ProveContent(ctx, m, zeroed, h.opts(cacheconfig.PolicyHeaders, cache)); !errors.Is(err, client.ErrPolicyRefused) {
		t.Fatalf("headers against a daemon that does not allow it: %v", err)
	}

	// An unchanged copy (cp -p): unknown under identity with a cold cache,
	// proven by one hash of each file under hash, then under identity from
	// the warm cache without hashing.
	copied := copyModel(t, f.model, filepath.Join(f.dir, "m3"))
	if err := client.ProveContent(ctx, m, copied, h.opts(cacheconfig.PolicyIdentity, cache)); !errors.As(err, &unknown) {
		t.Fatalf("identity, cold cache: %v", err)
	}
	clear(h.files)
	if err := client.ProveContent(ctx, m, copied, h.opts(cacheconfig.PolicyHash, cache)); err != nil {
		t.Fatalf("hash, unchanged copy: %v", err)
	}
	for _, p := range copied {
		if h.files[filepath.Base(p)] != 1 {
			t.Fatalf("hash: files hashed %v, want each once", h.files)
		}
	}
	clear(h.files)
	for _, p := range []cacheconfig.Policy{cacheconfig.PolicyIdentity, cacheconfig.PolicyHash} {
		if err := client.ProveContent(ctx, m, copied, h.opts(p, cache)); err != nil || len(h.files) != 0 {
			t.Fatalf("%s, warm cache: %v, hashed %v", p, err, h.files)
		}
	}

	// The digest cache trusts neither another uid's entries nor loose
	// permissions.
	other := &client.DigestCache{Dir: cache.Dir, UID: os.Geteuid() + 1}
	if err := client.ProveContent(ctx, m, copied, h.opts(cacheconfig.PolicyIdentity, other)); !errors.As(err, &unknown) {
		t.Fatalf("entries of another uid trusted: %v", err)
	}
	entries, _ := filepath.Glob(filepath.Join(cache.Dir, "*"))
	for _, e := range entries {
		if err := os.Chmod(e, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.ProveContent(ctx, m, copied, h.opts(cacheconfig.PolicyIdentity, cache)); !errors.As(err, &unknown) {
		t.Fatalf("world-writable entries trusted: %v", err)
	}

	// A loaded file changed in place afterwards, same size and mtime put
	// back (only its ctime tells): caught.
	orig := f.model.Files[0]
	before, _ := os.Stat(orig)
	time.Sleep(10 * time.Millisecond)
	zeroFirstTensor(t, orig)
	if err := os.Chtimes(orig, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := client.ProveContent(ctx, m, f.model.Files, h.opts(cacheconfig.PolicyIdentity, cache)); !errors.As(err, &unknown) {
		t.Fatalf("identity, file changed in place: %v", err)
	}
	err = client.ProveContent(ctx, m, f.model.Files, h.opts(cacheconfig.PolicyHash, cache))
	if !errors.As(err, &mismatch) || mismatch.Name != filepath.Base(orig) {
		t.Fatalf("hash, file changed in place: %v; want a mismatch naming %s", err, orig)
	}
}

// A daemon that allows "headers" lets a client skip the content check.
func TestContentPolicyHeadersWhenAllowed(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, func(o *Options) {
		o.ContentPolicies = []cacheconfig.Policy{cacheconfig.PolicyIdentity, cacheconfig.PolicyHeaders}
	})
	a := r.mustAttach(t)
	zeroed := copyModel(t, f.model, filepath.Join(f.dir, "m2"))
	zeroFirstTensor(t, zeroed[0])
	opts := client.ContentOptions{NoCache: true}
	opts.Policy = cacheconfig.PolicyHeaders
	if err := client.ProveContent(context.Background(), a.Manifest, zeroed, opts); err != nil {
		t.Fatalf("headers, allowed: %v", err)
	}
	opts.Policy = cacheconfig.PolicyHash
	if err := client.ProveContent(context.Background(), a.Manifest, zeroed, opts); !errors.Is(err, client.ErrPolicyRefused) {
		t.Fatalf("hash, not among the daemon's policies: %v", err)
	}
}

// checkContentRecords fails t unless records are, in order, the name,
// content digest (filedigest.Default) and identity of each of files.
func checkContentRecords(t *testing.T, records []cacheconfig.FileContent, files []string) {
	t.Helper()
	if len(records) != len(files) {
		t.Fatalf("%d content records for %d files", len(records), len(files))
	}
	for i, c := range records {
		b, err := os.ReadFile(files[i])
		if err != nil {
			t.Fatal(err)
		}
		st, _ := os.Stat(files[i])
		if c.Name != filepath.Base(files[i]) || c.Digest != filedigest.Bytes(b) || c.Identity != safetensors.StampOf(st) {
			t.Fatalf("record %d = %+v; want the digest %s and identity of %s", i, c, filedigest.Bytes(b), files[i])
		}
	}
}
