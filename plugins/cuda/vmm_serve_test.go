package main

import (
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
)

// daemonRow is the part of `wcache status --json` this test reads.
type daemonRow struct {
	State          string `json:"state"`
	Source         string `json:"source"`
	BytesLoaded    uint64 `json:"bytes_loaded"`
	PluginRestarts int    `json:"plugin_restarts"`
}

func statusRow(t *testing.T, w *gputest.World) daemonRow {
	t.Helper()
	code, stdout, stderr := w.Run("status", "--json")
	var rows []daemonRow
	if code != 0 || json.Unmarshal([]byte(stdout), &rows) != nil || len(rows) != 1 {
		t.Fatalf("status: exit %d\n%s\n%s", code, stdout, stderr)
	}
	return rows[0]
}

// TestServeVMMAttachVerifyPluginCrashTakeover runs the real `wcache
// serve --backend cuda --backend-opt handle=cuda-vmm-fd` on the fake
// driver: the daemon holds a descriptor of every cuMemCreate allocation,
// and `wcache attach --verify` (another process, with its own plugin)
// receives them over the descriptor channel, imports them with
// cuMemImportFromShareableHandle and compares every tensor with the file.
// Then the plugin is SIGKILLed: the daemon starts a new one that imports
// its descriptors, serves on without reading the checkpoint again (status:
// one restart, the same bytes loaded), and attach --verify passes again.
// Last, `serve --takeover` hands the same memory to a successor daemon
// without a load.
func TestServeVMMAttachVerifyPluginCrashTakeover(t *testing.T) {
	w := plugin().NewWorld(t, 3<<20+12)
	d := w.Start("serving ", append(append([]string{"serve"}, w.BackendArgs()...),
		"--gpu-id", "0", "--model", w.Model, "--backend-opt", "handle=cuda-vmm-fd")...)
	if sum := w.AttachVerify(0); !sum.Verified || sum.Tensors != 1 {
		t.Fatalf("attach = %+v, want 1 tensor verified", sum)
	}
	before := statusRow(t, w)
	if before.State != "serving" || before.BytesLoaded != 3<<20+12 || before.PluginRestarts != 0 {
		t.Fatalf("status before the crash = %+v", before)
	}

	first := d.PluginPID()
	if first == 0 {
		t.Fatalf("no backend plugin under the daemon:\n%s", d.Output())
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var after daemonRow
	_, _ = poll.Until(t.Context(), 60*time.Second, func() bool {
		after = statusRow(t, w)
		return after.PluginRestarts != 0
	})
	if after.State != "serving" || after.PluginRestarts != 1 || after.BytesLoaded != before.BytesLoaded {
		t.Fatalf("status after the plugin crash = %+v, want serving, 1 restart, %d bytes loaded (no reload)\n%s", after, before.BytesLoaded, d.Output())
	}
	if second := d.PluginPID(); second == 0 || second == first {
		t.Fatalf("plugin pid after the crash %d (was %d)", second, first)
	}
	if sum := w.AttachVerify(0); !sum.Verified || sum.Tensors != 1 {
		t.Fatalf("attach after the crash = %+v", sum)
	}

	// Takeover: a successor daemon receives the descriptors, imports them
	// in its own plugin and serves without loading; the old one exits.
	next := w.Start("serving ", append(append([]string{"serve"}, w.BackendArgs()...),
		"--gpu-id", "0", "--takeover", "--backend-opt", "handle=cuda-vmm-fd")...)
	select {
	case err := <-d.Done:
		d.Done <- err
		if err != nil {
			t.Fatalf("the old daemon ended with %v after the takeover:\n%s", err, d.Output())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the old daemon still runs 30 s after the takeover:\n%s", d.Output())
	}
	if st := statusRow(t, w); st.State != "serving" || st.Source != "takeover" || st.BytesLoaded != 0 {
		t.Fatalf("status after the takeover = %+v, want serving from takeover, nothing loaded\n%s", st, next.Output())
	}
	if sum := w.AttachVerify(0); !sum.Verified || sum.Tensors != 1 {
		t.Fatalf("attach after the takeover = %+v", sum)
	}
	if code := next.Stop(t); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM:\n%s", code, next.Output())
	}
}
