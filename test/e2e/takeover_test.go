package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// TestTakeoverServesTheSameGenerationWithoutLoading: `serve --takeover`
// against a live memfd daemon receives its descriptors, serves the same
// generation with nothing loaded (its Status says so), and the old daemon
// exits; a client attached before keeps reading the right bytes, and a
// client attaching after gets the same generation.
func TestTakeoverServesTheSameGenerationWithoutLoading(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1})
	model := genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{})
	old := h.startServe(0, model.Dir)
	before := h.statusOf(0)
	if before.StartPhases.Source != "files" || before.StartPhases.BytesLoaded == 0 {
		t.Fatalf("the first daemon: source %q, %d bytes loaded", before.StartPhases.Source, before.StartPhases.BytesLoaded)
	}
	pre, err := h.attachGo(h.UUIDs[0], clientConfig(t, model.Dir))
	if err != nil {
		t.Fatal(err)
	}
	defer pre.Lease.Close()
	checkBytes(t, pre.Manifest, model, 0)

	// The checkpoint files go away: a successor that read them would fail.
	hidden := model.Dir + ".hidden"
	mustRename(t, model.Dir, hidden)
	next := h.start("serve", "--backend", "mock", "--gpu-id", "0", "--takeover")
	h.waitReady(next, h.Paths(h.UUIDs[0]).Ready)
	if code := h.waitExit(old, 10*time.Second); code != 0 {
		t.Errorf("the daemon taken over exited %d, want 0:\n%s", code, old)
	}
	h.waitOutput(next, "taken over in") // printed just after the ready file
	after := h.statusOf(0)
	if after.PID == before.PID || after.Generation != before.Generation || after.StartPhases.Source != "takeover" ||
		after.StartPhases.BytesLoaded != 0 || after.StartPhases.BytesAdopted != before.Bytes || after.StartPhases.Load != 0 ||
		after.Tensors != before.Tensors || after.ConfigDigest != before.ConfigDigest {
		t.Fatalf("after the takeover: pid %d generation %d source %q loaded %d adopted %d load %s tensors %d digest %s\n"+
			"before: pid %d generation %d bytes %d tensors %d digest %s",
			after.PID, after.Generation, after.StartPhases.Source, after.StartPhases.BytesLoaded, after.StartPhases.BytesAdopted,
			after.StartPhases.Load, after.Tensors, after.ConfigDigest, before.PID, before.Generation, before.Bytes, before.Tensors, before.ConfigDigest)
	}
	t.Logf("takeover: start of the successor to its socket %s (from its Status)", after.StartPhases.Total)

	// The client from before the upgrade: its lease was ended by the old
	// daemon, its mapping is intact.
	select {
	case <-pre.Lease.Done():
	case <-time.After(5 * time.Second):
		t.Errorf("the old daemon did not end the lease it held")
	}
	checkBytes(t, pre.Manifest, model, 0)
	mustRename(t, hidden, model.Dir)
	post, err := h.attachGo(h.UUIDs[0], clientConfig(t, model.Dir))
	if err != nil {
		t.Fatal(err)
	}
	defer post.Lease.Close()
	if post.Manifest.Generation != pre.Manifest.Generation {
		t.Errorf("generation after the takeover %d, before %d", post.Manifest.Generation, pre.Manifest.Generation)
	}
	checkBytes(t, post.Manifest, model, 0)
	h.mustRun("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir, "--verify")
}

// mustRename renames a file or folder.
func mustRename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}
