package client

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/paths/pathstest"
	"github.com/wcache/wcache/core/safetensors"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// TestProofCacheFollowsIdentities: one Client attaching again and again to
// a sharded checkpoint derives its proof once and sends the same one while
// nothing changed; a shard rewritten in place (same size), a shard added
// to the index, a digest stored in the digest cache are each seen by the
// next attach on the same Client. The daemon here ignores the proof and
// keeps the first records, so a rewritten shard is refused on the
// client's side.
func TestProofCacheFollowsIdentities(t *testing.T) {
	dir := pathstest.ShortDir(t)
	model, res := twoShards(t, dir)
	// Times an hour back: a rewrite now changes every file's mtime, even
	// within the clock tick of its creation.
	past := time.Now().Add(-time.Hour)
	for _, f := range append(slices.Clone(res.Files), res.IndexPath, model) {
		if err := os.Chtimes(f, past, past); err != nil {
			t.Fatal(err)
		}
	}
	var proofs []*daemonv1.ContentProof
	var records []*daemonv1.FileContent
	path := serve(t, dir, &fakeDaemon{attach: func(req *daemonv1.AttachRequest, s daemonv1.Daemon_AttachServer) error {
		proofs = append(proofs, req.GetContent())
		if records == nil {
			records = req.GetContent().GetFiles()
		}
		ev := manifestEvent()
		ev.GetManifest().Files = records
		if err := s.Send(ev); err != nil {
			return err
		}
		<-s.Context().Done()
		return nil
	}})
	cache := &DigestCache{Dir: filepath.Join(dir, "digests"), UID: os.Geteuid()}
	if err := os.Mkdir(cache.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(cache.Dir, past, past); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(context.Background(), BySocket(path), Options{Content: ContentOptions{Cache: cache}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.proofs.settle = 0 // ctimes are now: keep them (the settle rule has its own test)
	cfg := cacheconfig.Default()
	cfg.Model = model
	attach := func() error {
		a, err := c.Attach(context.Background(), cfg)
		if err == nil {
			a.Lease.Close()
		}
		return err
	}
	sent := func(i int) map[string]*daemonv1.FileContent {
		out := map[string]*daemonv1.FileContent{}
		for _, f := range proofs[i].GetFiles() {
			out[f.GetName()] = f
		}
		return out
	}

	for i := range 3 {
		if err := attach(); err != nil {
			t.Fatalf("attach %d: %v", i, err)
		}
	}
	if len(c.proofs.lists) != 1 || len(c.proofs.files) != 2 {
		t.Fatalf("kept %d lists and %d files, want 1 and 2", len(c.proofs.lists), len(c.proofs.files))
	}
	for i := 1; i < 3; i++ {
		for name, f := range sent(0) {
			if g := sent(i)[name]; g == nil || g.GetIno() != f.GetIno() || g.GetMtimeNs() != f.GetMtimeNs() || g.GetDigest() != f.GetDigest() {
				t.Errorf("attach %d sent %v for %s, the first %v", i, g, name, f)
			}
		}
	}

	// A shard rewritten in place, same size: its new identity is sent and
	// the daemon's records (the old one) prove nothing.
	b, err := os.ReadFile(res.Files[1])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(res.Files[1], b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := attach(); !errors.Is(err, cacheconfig.ErrContentUnknown) {
		t.Errorf("after a shard was rewritten in place: want ErrContentUnknown, got %v", err)
	}
	name1 := filepath.Base(res.Files[1])
	if old, now := sent(0)[name1], sent(len(proofs) - 1)[name1]; now.GetMtimeNs() == old.GetMtimeNs() && now.GetCtimeNs() == old.GetCtimeNs() {
		t.Errorf("the rewritten shard was sent with its old identity %v", now)
	}

	// Its digest stored in the digest cache: the next proof carries it.
	st, err := os.Stat(res.Files[1])
	if err != nil {
		t.Fatal(err)
	}
	digest := "sha256-tree-1m:" + string(slices.Repeat([]byte("ab"), 32))
	if err := cache.Store(safetensors.StampOf(st), digest); err != nil {
		t.Fatal(err)
	}
	_ = attach()
	if got := sent(len(proofs) - 1)[name1].GetDigest(); got != digest {
		t.Errorf("after the digest was cached: sent digest %q, want %q", got, digest)
	}

	// A third shard added to the index: the next proof lists it.
	extra := filepath.Join(model, "extra.safetensors")
	if err := os.WriteFile(extra, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ix, err := os.ReadFile(res.IndexPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(ix, &doc); err != nil {
		t.Fatal(err)
	}
	doc["weight_map"].(map[string]any)["extra.weight"] = "extra.safetensors"
	if ix, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(res.IndexPath, ix, 0o644); err != nil {
		t.Fatal(err)
	}
	_ = attach()
	if sent(len(proofs) - 1)["extra.safetensors"] == nil {
		t.Errorf("after a shard was added to the index, the proof lists %v", proofs[len(proofs)-1].GetFiles())
	}
}

// TestProofCacheKeepsOnlySettledIdentities: a file changed within the
// settle time is derived again on every attach (a change within the same
// clock tick could leave its identity equal); once older, it is kept.
func TestProofCacheKeepsOnlySettledIdentities(t *testing.T) {
	dir := pathstest.ShortDir(t)
	_, res := twoShards(t, dir)
	pc := newProofCache()
	now := time.Now()
	pc.now = func() time.Time { return now }
	opts := ContentOptions{NoCache: true}
	if _, err := pc.modelFiles(filepath.Join(dir, "m")); err != nil {
		t.Fatal(err)
	}
	if _, err := newContentProof(res.Files, opts, pc); err != nil {
		t.Fatal(err)
	}
	if len(pc.lists) != 0 || len(pc.files) != 0 {
		t.Errorf("just written: kept %d lists and %d files, want none", len(pc.lists), len(pc.files))
	}
	now = now.Add(pc.settle + time.Second)
	files, err := pc.modelFiles(filepath.Join(dir, "m"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newContentProof(files, opts, pc); err != nil {
		t.Fatal(err)
	}
	if len(pc.lists) != 1 || len(pc.files) != len(res.Files) {
		t.Errorf("settled: kept %d lists and %d files, want 1 and %d", len(pc.lists), len(pc.files), len(res.Files))
	}
}
