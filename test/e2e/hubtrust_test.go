package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// Hub ids and blob names from safe places only (issue 35 item 6).

// TestHubIDWinsOverARelativeDirectory: the working directory of serve and
// attach holds ./acme/tiny, another model (as another user could plant in
// a shared /tmp). `--model acme/tiny` is the hub id: the daemon serves the
// hub cache's snapshot, not the directory; `--model ./acme/tiny` names the
// directory (another checkpoint: incompatible, exit 4). An id absent from
// the cache beside a directory of its spelling is a usage error that says
// to pass ./acme/absent, never a load of the directory.
func TestHubIDWinsOverARelativeDirectory(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1})
	_, snap, withHub := h.acmeTinyHub()
	genModel(t, filepath.Join(h.Root, "acme", "tiny"), safetensorstest.GenOptions{Shards: 1, HiddenSize: 64}) // the planted one, in serve's working directory
	if err := os.MkdirAll(filepath.Join(h.Root, "acme", "absent"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := h.startWith(withHub, serveArgs(0, "acme/tiny")...)
	h.waitReady(p, h.Paths(h.UUIDs[0]).Ready)
	st, err := h.mustDialGo(0).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Generations) != 1 || st.Generations[0].Model != snap {
		t.Fatalf("serve --model acme/tiny beside ./acme/tiny serves %+v; want the hub snapshot %s", st.Generations, snap)
	}
	if res := h.runWith(withHub, "attach", "--backend", "mock", "--gpu-id", "0", "--model", "acme/tiny"); res.Code != 0 {
		t.Errorf("attach --model acme/tiny: want exit 0 (the hub snapshot the daemon serves)\n%s", res)
	}
	if res := h.runWith(withHub, "attach", "--backend", "mock", "--gpu-id", "0", "--model", "./acme/tiny"); res.Code != 4 {
		t.Errorf("attach --model ./acme/tiny (another checkpoint): want exit 4, incompatible\n%s", res)
	}
	res := h.runWith(withHub, "attach", "--backend", "mock", "--gpu-id", "0", "--model", "acme/absent")
	if res.Code != 2 || !strings.Contains(res.Stderr, "pass ./acme/absent") {
		t.Errorf("attach --model acme/absent beside ./acme/absent: want exit 2 saying to pass ./acme/absent\n%s", res)
	}
}

// TestHubBlobInAWritableFolderProvesNothing: a client whose files are
// another hub cache's copy attaches by the blob names the daemon verified
// (no hashing) — until a folder on the blobs' way is writable by others
// (who could rename one blob to another's name): then the names prove
// nothing (exit 3), and with the folder private again they do.
func TestHubBlobInAWritableFolderProvesNothing(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1})
	m := genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{Shards: 2, HiddenSize: 128})
	const commit = "0123456789abcdef0123456789abcdef01234567"
	snapA := safetensorstest.HubSnapshot(t, filepath.Join(h.Root, "hubA", "models--acme--tiny"), commit, m.Dir, nil)
	repoB := filepath.Join(h.Root, "hubB", "models--acme--tiny")
	snapB := safetensorstest.HubSnapshot(t, repoB, commit, m.Dir, nil)
	h.startServe(0, snapA)
	waitBlobSums(t, h, 0, filepath.Base(m.Files[0]), filepath.Base(m.Files[1]))

	attach := attacher(t, h)
	if res := attach(snapB); res.Code != 0 || strings.Contains(res.Stderr, "hashing") {
		t.Fatalf("a copy in another hub cache: want exit 0 without hashing\n%s", res)
	}
	for _, dir := range []string{filepath.Join(repoB, "blobs"), repoB} {
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		if res := attach(snapB); res.Code != 3 {
			t.Errorf("blobs reached through %s, writable by others: want exit 3 (names prove nothing)\n%s", dir, res)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if res := attach(snapB); res.Code != 0 {
		t.Errorf("the folders private again: want exit 0\n%s", res)
	}
}
