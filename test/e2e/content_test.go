package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/hubcache"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/internal/poll"
)

// copyWithATensorZeroed copies the model folder src to dst
// (safetensorstest.CopyCheckpoint) and zeroes the last tensor of the copy
// of src's file: same headers, same checkpoint_digest, other weights. It
// returns the zeroed file.
func copyWithATensorZeroed(t *testing.T, src, dst, file string) string {
	t.Helper()
	safetensorstest.CopyCheckpoint(t, src, dst)
	zeroed := filepath.Join(dst, filepath.Base(file))
	if _, err := safetensorstest.ZeroTensor(zeroed, -1); err != nil {
		t.Fatal(err)
	}
	return zeroed
}

// attacher returns a function that runs `wcache attach --model MODEL
// EXTRA...` on mock device 0 with a digest cache of its own under h.Root.
func attacher(t *testing.T, h *harness) func(model string, extra ...string) cliResult {
	cache := filepath.Join(h.Root, "xdg-cache")
	withCache := func(c *exec.Cmd) { c.Env = append(c.Env, "XDG_CACHE_HOME="+cache) }
	return func(model string, extra ...string) cliResult {
		t.Helper()
		return h.runWith(withCache, append([]string{"attach", "--backend", "mock", "--gpu-id", "0", "--model", model}, extra...)...)
	}
}

// TestAttachRefusesACopyWithATensorZeroed: the scenario of issue 24. A
// daemon serves m1; m2 is a copy with one tensor zeroed (same headers).
// `wcache attach --model m2` must not hand out m1's bytes: under
// --content identity it is a miss (exit 3, load from disk), under hash a
// mismatch naming the file (exit 4), and headers is refused by a daemon
// that does not allow it. An unchanged `cp -p` copy attaches after one
// hash, then from the warm digest cache.
func TestAttachRefusesACopyWithATensorZeroed(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1})
	m1 := genModel(t, filepath.Join(h.Root, "m1"), safetensorstest.GenOptions{Shards: 2, HiddenSize: 256})
	h.startServe(0, m1.Dir)
	attach := attacher(t, h)
	if res := attach(m1.Dir); res.Code != 0 {
		t.Fatalf("the daemon's own files: %s", res)
	}
	m2 := filepath.Join(h.Root, "m2")
	zeroed := copyWithATensorZeroed(t, m1.Dir, m2, m1.Files[1])
	if res := attach(m2); res.Code != 3 || !strings.Contains(res.Stderr, "content not proven") {
		t.Errorf("zeroed copy, --content identity: want exit 3 (content not proven)\n%s", res)
	}
	if res := attach(m2, "--content", "hash"); res.Code != 4 || !strings.Contains(res.Stderr, "content mismatch: "+filepath.Base(zeroed)) {
		t.Errorf("zeroed copy, --content hash: want exit 4 naming %s\n%s", zeroed, res)
	}
	if res := attach(m2, "--content", "headers"); res.Code != 4 || !strings.Contains(res.Stderr, "refused") {
		t.Errorf("zeroed copy, --content headers: want exit 4 (refused by the daemon)\n%s", res)
	}

	m3 := filepath.Join(h.Root, "m3")
	safetensorstest.CopyCheckpoint(t, m1.Dir, m3)
	if res := attach(m3); res.Code != 3 {
		t.Errorf("unchanged copy, cold cache, --content identity: want exit 3\n%s", res)
	}
	if res := attach(m3, "--content", "hash"); res.Code != 0 || !strings.Contains(res.Stderr, "hashing") {
		t.Errorf("unchanged copy, --content hash: want exit 0 after hashing\n%s", res)
	}
	if res := attach(m3); res.Code != 0 || strings.Contains(res.Stderr, "hashing") {
		t.Errorf("unchanged copy, warm cache, --content identity: want exit 0 without hashing\n%s", res)
	}
}

// TestPublishCarriesContent: `wcache publish --model m1` into an empty
// daemon carries the files' content, so an attach naming m1 proves it by
// identity, and one naming a copy with a tensor zeroed is refused.
func TestPublishCarriesContent(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1})
	m1 := genModel(t, filepath.Join(h.Root, "m1"), safetensorstest.GenOptions{Shards: 2, HiddenSize: 256})
	h.startEmpty(0)
	h.mustRun("publish", "--backend", "mock", "--gpu-id", "0", "--model", m1.Dir)
	attach := attacher(t, h)
	if res := attach(m1.Dir); res.Code != 0 {
		t.Fatalf("the published files: %s", res)
	}
	m2 := filepath.Join(h.Root, "m2")
	zeroed := copyWithATensorZeroed(t, m1.Dir, m2, m1.Files[0])
	if res := attach(m2, "--content", "hash"); res.Code != 4 || !strings.Contains(res.Stderr, "content mismatch: "+filepath.Base(zeroed)) {
		t.Errorf("zeroed copy of published files, --content hash: want exit 4 naming %s\n%s", zeroed, res)
	}
}

// acmeTinyCommit is the revision acmeTinyHub publishes acme/tiny at.
const acmeTinyCommit = "89abcdef0123456789abcdef0123456789abcdef"

// acmeTinyHub generates a two-shard checkpoint under h.Root/m and
// publishes it as acme/tiny at acmeTinyCommit in a Hugging Face cache at
// hub (h.Root/hf/hub); snap is that snapshot's folder, and withHub points a
// command at the cache (and at an XDG cache folder of the test's own).
func (h *harness) acmeTinyHub() (hub, snap string, withHub func(*exec.Cmd)) {
	h.t.Helper()
	m := genModel(h.t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{Shards: 2, HiddenSize: 128})
	hub = filepath.Join(h.Root, "hf", "hub")
	snap = safetensorstest.HubSnapshot(h.t, filepath.Join(hub, "models--acme--tiny"), acmeTinyCommit, m.Dir, nil)
	withHub = func(c *exec.Cmd) {
		c.Env = append(c.Env, "HF_HUB_CACHE="+hub, "XDG_CACHE_HOME="+filepath.Join(h.Root, "xdg"))
	}
	return hub, snap, withHub
}

// TestHubIDsOffline: `--model org/name` and `org/name@revision` resolve
// through a local Hugging Face cache (snapshots/ symlinks into blobs/ named
// by SHA-256), without network, in serve and attach; the attach proves the
// files by identity (no hashing); an id absent from the cache is a usage
// error naming where it looked.
func TestHubIDsOffline(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1})
	hub, snap, withHub := h.acmeTinyHub()
	p := h.startWith(withHub, serveArgs(0, "acme/tiny")...)
	h.waitReady(p, h.Paths(h.UUIDs[0]).Ready)
	for _, model := range []string{"acme/tiny", "acme/tiny@main", "acme/tiny@" + acmeTinyCommit, snap} {
		res := h.runWith(withHub, "attach", "--backend", "mock", "--gpu-id", "0", "--model", model)
		if res.Code != 0 || strings.Contains(res.Stderr, "hashing") {
			t.Errorf("attach --model %s: want exit 0 without hashing\n%s", model, res)
		}
	}
	res := h.runWith(withHub, "attach", "--backend", "mock", "--gpu-id", "0", "--model", "acme/absent@v1")
	if want := filepath.Join(hub, "models--acme--absent", "refs", "v1"); res.Code != 2 || !strings.Contains(res.Stderr, want) {
		t.Errorf("attach --model acme/absent@v1: want exit 2 naming %s\n%s", want, res)
	}
}

// waitBlobSums polls the Status of the daemon of mock device gpu until it
// has verified the hub blob names of want (file names), and returns the
// files with their SHA256 (the daemon verifies them in the background after
// it starts serving). It fails the test after a generous bound.
func waitBlobSums(t *testing.T, h *harness, gpu int, want ...string) []cacheconfig.FileContent {
	t.Helper()
	c := h.mustDialGo(gpu)
	var files []cacheconfig.FileContent
	if ok, _ := poll.Until(context.Background(), 2*time.Minute, func() bool {
		st, err := c.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		files = st.Files
		done := 0
		for _, f := range files {
			if f.SHA256 != "" && slices.Contains(want, f.Name) {
				done++
			}
		}
		return done == len(want)
	}); !ok {
		t.Fatalf("device %d: hub blob names of %v not verified: %+v", gpu, want, files)
	}
	return files
}

// TestHubBlobNamesProveACopy: a daemon that loaded a model from a hub cache
// verifies the blob names (plain SHA-256) after it starts serving and
// records them; a client whose files are another hub cache's copy (other
// inodes, the same blob names) then attaches under --content identity
// without hashing. A blob whose name is not its content's SHA-256 is never
// recorded, and a blob writable by others proves nothing.
func TestHubBlobNamesProveACopy(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2})
	m := genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{Shards: 2, HiddenSize: 128})
	first, second := filepath.Base(m.Files[0]), filepath.Base(m.Files[1])
	const commit = "0123456789abcdef0123456789abcdef01234567"
	snapA := safetensorstest.HubSnapshot(t, filepath.Join(h.Root, "hubA", "models--acme--tiny"), commit, m.Dir, nil)
	snapB := safetensorstest.HubSnapshot(t, filepath.Join(h.Root, "hubB", "models--acme--tiny"), commit, m.Dir, nil)
	snapBad := safetensorstest.HubSnapshot(t, filepath.Join(h.Root, "hubC", "models--acme--tiny"), commit, m.Dir, func(f string) bool { return f == first })
	h.startServe(0, snapA)
	h.startServe(1, snapBad)

	files := waitBlobSums(t, h, 0, first, second)
	for _, f := range files {
		if want, _, _ := hubcache.BlobSHA256(filepath.Join(snapA, f.Name)); f.SHA256 != want {
			t.Errorf("%s: recorded SHA-256 %q, blob name %q", f.Name, f.SHA256, want)
		}
	}
	// The daemon verifies in name order: once the second is recorded, the
	// first (misnamed) was checked and refused.
	for _, f := range waitBlobSums(t, h, 1, second) {
		if f.Name == first && f.SHA256 != "" {
			t.Errorf("device 1 recorded %s for the misnamed blob of %s", f.SHA256, first)
		}
	}

	attach := attacher(t, h)
	if res := attach(snapB); res.Code != 0 || strings.Contains(res.Stderr, "hashing") {
		t.Errorf("a copy in another hub cache, --content identity: want exit 0 without hashing\n%s", res)
	}
	blobB, _ := filepath.EvalSymlinks(filepath.Join(snapB, second))
	if err := os.Chmod(blobB, 0o664); err != nil {
		t.Fatal(err)
	}
	if res := attach(snapB); res.Code != 3 {
		t.Errorf("a blob writable by its group proves nothing: want exit 3\n%s", res)
	}
	if err := os.Chmod(blobB, 0o644); err != nil {
		t.Fatal(err)
	}
	res := h.run("attach", "--backend", "mock", "--gpu-id", "1", "--model", snapB)
	if res.Code != 3 || !strings.Contains(res.Stderr, "content not proven: "+first) {
		t.Errorf("device 1 did not record the misnamed blob: want exit 3 naming %s\n%s", first, res)
	}
}

// TestHubBlobNamesPerGeneration: a daemon that serves a target and a draft
// from a hub cache verifies each generation's blob names and reports them
// with that generation in Status (the top-level files are the oldest
// generation's); an attach to the draft then proves a copy of it in another
// hub cache without hashing (its lease carries the draft's names).
func TestHubBlobNamesPerGeneration(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1})
	const commit = "0123456789abcdef0123456789abcdef01234567"
	var snaps, copies []string
	for i := range 2 {
		m := genModel(t, filepath.Join(h.Root, fmt.Sprint("m", i)),
			safetensorstest.GenOptions{Shards: 2, HiddenSize: 128, Layers: 2 - i, Seed: uint64(i + 1)})
		repo := fmt.Sprintf("models--acme--m%d", i)
		snaps = append(snaps, safetensorstest.HubSnapshot(t, filepath.Join(h.Root, "hubA", repo), commit, m.Dir, nil))
		copies = append(copies, safetensorstest.HubSnapshot(t, filepath.Join(h.Root, "hubB", repo), commit, m.Dir, nil))
	}
	h.startServe(0, snaps[0], "--draft-model", snaps[1])
	verified := func(snap string, files []cacheconfig.FileContent) bool {
		for _, f := range files {
			if want, _, _ := hubcache.BlobSHA256(filepath.Join(snap, f.Name)); f.SHA256 != want {
				return false
			}
		}
		return len(files) == 2
	}
	// which is the snapshot whose blob names files carry, or -1.
	which := func(files []cacheconfig.FileContent) int {
		for i, snap := range snaps {
			if verified(snap, files) {
				return i
			}
		}
		return -1
	}
	var st *client.Status
	if ok, _ := poll.Until(context.Background(), 2*time.Minute, func() bool {
		st = h.statusOf(0)
		if len(st.Generations) != 2 {
			t.Fatalf("status: %d generations, want the target and the draft", len(st.Generations))
		}
		g0, g1 := which(st.Generations[0].Files), which(st.Generations[1].Files)
		return g0 >= 0 && g1 >= 0 && g0 != g1 && which(st.Files) == g0
	}); !ok {
		t.Fatalf("hub blob names not verified per generation: %+v", st.Generations)
	}
	if res := attacher(t, h)(copies[1]); res.Code != 0 || strings.Contains(res.Stderr, "hashing") {
		t.Errorf("a copy of the draft in another hub cache, --content identity: want exit 0 without hashing\n%s", res)
	}
}
