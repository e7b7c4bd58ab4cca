package e2e

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// TestTakeoverServesTheSameGenerationWithoutLoading: `serve --takeover`
// against a live memfd daemon receives its descriptors, serves the same
// generation with nothing loaded (its Status says so), and the old daemon
// exits; a client attached before keeps its lease (resumed on the
// successor) and reads the right bytes, and a client attaching after gets
// the same generation.
func TestTakeoverServesTheSameGenerationWithoutLoading(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	old := h.startServe(0, model.Dir)
	before := h.statusOf(0)
	if before.StartPhases.Source != "files" || before.StartPhases.BytesLoaded == 0 {
		t.Fatalf("the first daemon: source %q, %d bytes loaded", before.StartPhases.Source, before.StartPhases.BytesLoaded)
	}
	pre := h.mustAttachGo(h.UUIDs[0], clientConfig(t, model.Dir))
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

	// The client from before the upgrade did not notice: its lease was
	// resumed on the successor (the same generation), it never ended, and
	// its mapping is intact.
	h.waitLeases(h.UUIDs[0], 1)
	checkLeaseLives(t, pre.Lease, "the takeover")
	if st := h.statusOf(0); len(st.Leases) != 1 || st.Leases[0].ID != pre.Lease.ID() {
		t.Fatalf("the successor's leases %+v, want the resumed lease %d", st.Leases, pre.Lease.ID())
	}
	checkBytes(t, pre.Manifest, model, 0)
	mustRename(t, hidden, model.Dir)
	post := h.mustAttachGo(h.UUIDs[0], clientConfig(t, model.Dir))
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

// checkServesOn waits for daemon d to say says (that it serves on after
// a takeover that did not happen) and fails the test unless it did, d is
// still running and the lease held through it lives on after what failed.
func checkServesOn(t *testing.T, d *process, says string, held *client.Lease, after string) {
	t.Helper()
	if err := d.WaitOutput(context.Background(), says, readyTimeout); err != nil {
		t.Fatalf("%v\n%s", err, d)
	}
	if d.Exited() {
		t.Fatalf("the daemon exited after %s:\n%s", after, d)
	}
	checkLeaseLives(t, held, after)
}

// mustRequestTakeover sends op TAKEOVER to GPU 0's descriptor channel
// under the lease id and descriptor token of a (a same-uid client playing
// a successor); a failure ends the test. The caller closes the Takeover.
func (h *harness) mustRequestTakeover(ctx context.Context, a *client.Attachment) *fdchannel.Takeover {
	h.t.Helper()
	req := fdchannel.Request{ID: a.Manifest.LeaseID}
	copy(req.Token[:], a.Manifest.FDToken)
	tk, err := fdchannel.RequestTakeover(ctx, fdchannel.Path(h.Paths(h.UUIDs[0]).Socket), req)
	if err != nil {
		h.t.Fatal(err)
	}
	return tk
}

// serveHolding serves model on device 0 and holds one lease on it through
// a Go client; before is the daemon's Status ahead of that lease (what
// checkServedOnUnchanged compares with).
func (h *harness) serveHolding(model *safetensorstest.Result) (d *process, before *client.Status, held *client.Attachment) {
	h.t.Helper()
	d = h.startServe(0, model.Dir)
	before = h.statusOf(0)
	return d, before, h.mustAttachGo(h.UUIDs[0], clientConfig(h.t, model.Dir))
}

// checkServedOnUnchanged fails the test unless the daemon of GPU 0 still
// has the pid and generation of before and only the lease held, its ready
// file names that pid, held reads the model's bytes and attach --verify
// passes: what a takeover that did not happen (after what) must leave.
func (h *harness) checkServedOnUnchanged(before *client.Status, held *client.Attachment, model *safetensorstest.Result, after string) {
	t := h.t
	t.Helper()
	now := h.statusOf(0)
	if now.PID != before.PID || now.Generation != before.Generation || len(now.Leases) != 1 ||
		now.Leases[0].ID != held.Lease.ID() {
		t.Fatalf("after %s: pid %d generation %d leases %+v; before pid %d generation %d lease %d",
			after, now.PID, now.Generation, now.Leases, before.PID, before.Generation, held.Lease.ID())
	}
	if r, err := daemonfile.ReadReady(h.Paths(h.UUIDs[0]).Ready); err != nil || r.PID != before.PID {
		t.Fatalf("ready file after %s: %+v, %v; want pid %d", after, r, err, before.PID)
	}
	checkBytes(t, held.Manifest, model, 0)
	h.mustRun("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir, "--verify")
}

// TestTakeoverRequestWithoutImportLeavesTheDaemonServing: a same-uid
// client that asks for the writable descriptors (op TAKEOVER) and then
// closes without acknowledging their import — a rogue client, or a
// successor that died while importing — does not make the daemon hand
// over: it keeps its pid, its leases and its clients.
func TestTakeoverRequestWithoutImportLeavesTheDaemonServing(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	d, before, held := h.serveHolding(model)
	rogue := h.mustAttachGo(h.UUIDs[0], clientConfig(t, model.Dir))
	tk := h.mustRequestTakeover(context.Background(), rogue)
	if len(tk.Descriptors) == 0 {
		t.Fatal("op TAKEOVER sent no descriptor")
	}
	fdchannel.CloseAll(tk.Descriptors)
	tk.Close() // no Imported
	checkServesOn(t, d, "did not acknowledge the import; serving on", held.Lease, "the unacknowledged takeover request")
	after := h.statusOf(0)
	if after.PID != before.PID || after.Generation != before.Generation || len(after.Leases) != 2 {
		t.Fatalf("after the request: pid %d generation %d leases %d; before pid %d generation %d",
			after.PID, after.Generation, len(after.Leases), before.PID, before.Generation)
	}
	checkBytes(t, held.Manifest, model, 0)
}

// TestTakeoverSuccessorKilledAfterImportLeavesTheDaemonServing: a
// successor SIGKILLed right after it imported the descriptors — once the
// old daemon has released its identity lock and socket to it, before it
// took them (test hook WCACHE_TEST_TAKEOVER_DIE_AFTER=imported) — does
// not lose the cache: the old daemon takes its lock back and serves on
// with the same pid, generation and leases (the lease held through it
// never ends and reads the right bytes), attach --verify passes, and a
// later takeover still succeeds.
func TestTakeoverSuccessorKilledAfterImportLeavesTheDaemonServing(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	old, before, held := h.serveHolding(model)

	dying := h.startWith(func(c *exec.Cmd) { c.Env = append(c.Env, "WCACHE_TEST_TAKEOVER_DIE_AFTER=imported") },
		"serve", "--backend", "mock", "--gpu-id", "0", "--takeover")
	h.waitExit(dying, 30*time.Second)
	// The old daemon logs the release after it sent it, so the line may
	// follow the successor's death by a moment: wait for it.
	if err := old.WaitOutput(context.Background(), "released the lock and socket to the successor", readyTimeout); err != nil {
		t.Fatalf("the successor died before the old daemon released its lock: the hook did not test the window: %v\n%s\n%s", err, old, dying)
	}
	checkServesOn(t, old, "takeover: serving again", held.Lease, "the failed takeover")
	h.checkServedOnUnchanged(before, held, model, "the failed takeover")

	// The descriptor channel listens again: a successor that lives takes over.
	next := h.start("serve", "--backend", "mock", "--gpu-id", "0", "--takeover")
	h.waitReady(next, h.Paths(h.UUIDs[0]).Ready)
	if code := h.waitExit(old, 10*time.Second); code != 0 {
		t.Errorf("the daemon taken over exited %d, want 0:\n%s", code, old)
	}
	if st := h.statusOf(0); st.PID != next.PID() || st.Generation != before.Generation {
		t.Fatalf("after the second takeover: pid %d generation %d, want pid %d generation %d", st.PID, st.Generation, next.PID(), before.Generation)
	}
	checkBytes(t, held.Manifest, model, 0)
}

// TestTakeoverOfADeadDaemonsLeftoversStartsNormally: `serve --takeover`
// where a SIGKILLed daemon left its socket, descriptor channel and ready
// file loads the checkpoint and serves, as documented.
func TestTakeoverOfADeadDaemonsLeftoversStartsNormally(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	old := h.startServe(0, model.Dir)
	old.Kill()
	p := h.Paths(h.UUIDs[0])
	for _, f := range []string{p.Socket, fdchannel.Path(p.Socket), p.Ready} {
		if _, err := os.Lstat(f); err != nil {
			t.Fatalf("the killed daemon left no %s: %v", f, err)
		}
	}
	next := h.start(serveArgs(0, model.Dir, "--takeover")...)
	h.waitReady(next, p.Ready)
	st := h.statusOf(0)
	if st.PID != next.PID() || st.StartPhases.Source != "files" || st.StartPhases.BytesLoaded == 0 {
		t.Fatalf("serve --takeover over leftovers: pid %d (want %d), source %q, %d bytes loaded",
			st.PID, next.PID(), st.StartPhases.Source, st.StartPhases.BytesLoaded)
	}
	h.mustRun("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir, "--verify")
}
