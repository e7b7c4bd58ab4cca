package e2e

import (
	"bytes"
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/test/testproc"
)

// pluginPID is the pid of the backend plugin serving the daemon at pid.
func pluginPID(t *testing.T, daemon int) int {
	t.Helper()
	pid, err := testproc.PluginPID(daemon)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// statusOf is the daemon's own Status over core/client.
func (h *harness) statusOf(gpu int) *client.Status {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := h.Status(ctx, h.UUIDs[gpu])
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

// TestPluginKilledDaemonServesOn: with memfd handles, SIGKILL of the mock
// plugin while a client holds a lease loses no weights: the daemon starts a
// new plugin that imports its descriptors, the lease lives on with its
// mapping intact, `attach --verify` passes, and nothing was loaded again
// (Status: one restart, the same generation, the same bytes loaded).
func TestPluginKilledDaemonServesOn(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	d, before, att := h.serveHolding(model)
	checkBytes(t, att.Manifest, model, 0)

	first := pluginPID(t, d.PID())
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var after *client.Status
	poll.Until(context.Background(), readyTimeout, func() bool {
		after = h.statusOf(0)
		return after.StartPhases.PluginRestarts > 0
	})
	if after.StartPhases.PluginRestarts != 1 {
		t.Fatalf("daemon reports %d plugin restarts after the kill, want 1:\n%s", after.StartPhases.PluginRestarts, d)
	}
	if second := pluginPID(t, d.PID()); second == first {
		t.Fatalf("plugin pid %d after the kill: not replaced", second)
	}
	checkLeaseLives(t, att.Lease, "the plugin's death")
	if after.Generation != before.Generation || after.StartPhases.BytesLoaded != before.StartPhases.BytesLoaded ||
		after.StartPhases.Load != before.StartPhases.Load || after.State != "serving" || len(after.Leases) != 1 {
		t.Fatalf("after the restart: generation %d, loaded %d bytes in %s, %s, %d leases; before: generation %d, %d bytes in %s",
			after.Generation, after.StartPhases.BytesLoaded, after.StartPhases.Load, after.State, len(after.Leases),
			before.Generation, before.StartPhases.BytesLoaded, before.StartPhases.Load)
	}
	checkBytes(t, att.Manifest, model, 0)
	res := h.mustRun("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir, "--verify")
	if !bytes.Contains([]byte(res.Stdout), []byte("tensors match the files")) {
		t.Errorf("attach --verify after the restart:\n%s", res)
	}
	if d.Exited() {
		t.Fatalf("the daemon exited:\n%s", d)
	}
	// A name-handle daemon still treats the plugin's exit as fatal
	// (invariant 8): TestPluginCrashEndsDaemon covers posix-shm.
}
