package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/daemon/daemontest/testworld"
	"github.com/wcache/wcache/sdk/names"
)

// TestPeerFillProvesTheFilesNotTheSiblingsMemory (issue 35, item 2): daemon
// A serves the checkpoint from posix-shm arenas; a process of the same uid
// then writes other bytes into them (A's `attach --verify` fails from then
// on). Daemon B starts with the same --model on the next device: it finds
// A (same weights identity, the very files A loaded, A's records true of
// them), copies A's arenas, and must prove the copy against what its local
// files hold — the digest cache A's load recorded, or, with a digest cache
// of its own that knows nothing, the files hashed alongside the copy — and
// so refuse it: B reads the files, says why in its log, in Status
// (fill_fallback) and in `wcache status`, and serves the files' bytes
// (`attach --verify` exits 0). With `serve --verify` B does the same
// instead of exiting.
func TestPeerFillProvesTheFilesNotTheSiblingsMemory(t *testing.T) {
	cases := []struct {
		name string
		// env and args are B's extra; how is the way B knew its files.
		env  func(h *harness) []string
		args []string
		how  string
	}{
		{name: "the digest cache A's load recorded", how: "(digest cache)"},
		{name: "the local files hashed alongside the copy", how: "(hashed the local file)",
			env: func(h *harness) []string { return []string{"XDG_CACHE_HOME=" + filepath.Join(h.Root, "cache-of-b")} }},
		{name: "serve --verify", args: []string{"--verify"}, how: "(digest cache)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{Devices: 2, Env: []string{"WCACHE_MOCK_HANDLE=posix-shm"}})
			model := genModel(t, filepath.Join(h.Root, "m"), peerFillModel)
			h.startServe(0, model.Dir)
			a := h.mustAttachGo(h.UUIDs[0], clientConfig(t, model.Dir))
			for i, hd := range a.Manifest.Handles {
				if hd.Kind != names.KindPosixShm {
					t.Fatalf("A's arena %d is %q, want posix-shm", i, hd.Kind)
				}
				testworld.Scribble(t, string(hd.Data))
			}
			if res := h.run("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir, "--verify"); res.Code != 1 {
				t.Fatalf("A's memory written: attach --verify to A exits %d, want 1 (the scribble did not take):\n%s", res.Code, res)
			}

			var env []string
			if tc.env != nil {
				env = tc.env(h)
			}
			b := h.startWith(func(c *exec.Cmd) { c.Env = append(c.Env, env...) }, serveArgs(1, model.Dir, tc.args...)...)
			h.waitReady(b, h.Paths(h.UUIDs[1]).Ready)
			st := h.statusOf(1)
			if st.FilledFrom != "files" || st.StartPhases.BytesLoaded != model.TotalBytes || st.StartPhases.BytesFromPeer != 0 {
				t.Fatalf("B: filled from %q (fallback %q), %d bytes loaded, %d from a peer; want the files, %d",
					st.FilledFrom, st.FillFallback, st.StartPhases.BytesLoaded, st.StartPhases.BytesFromPeer, model.TotalBytes)
			}
			why := tc.how + ": the source's memory is not these files"
			if !strings.Contains(st.FillFallback, why) || !strings.Contains(st.FillFallback, "peer "+h.UUIDs[0]) {
				t.Errorf("B's fill_fallback %q, want the sibling named and %q", st.FillFallback, why)
			}
			if out := b.Stderr(); !strings.Contains(out, "peer fill failed: reading the files instead") || !strings.Contains(out, why) {
				t.Errorf("B's log does not say why it read the files:\n%s", b)
			}
			if res := h.mustRun("status"); !strings.Contains(res.Stdout, "filled from files (peer fill fell back: ") {
				t.Errorf("status does not say where B's weights came from:\n%s", res)
			}
			h.mustRun("attach", "--backend", "mock", "--gpu-id", "1", "--model", model.Dir, "--verify")
			checkBytes(t, h.mustAttachGo(h.UUIDs[1], clientConfig(t, model.Dir)).Manifest, model, 0)
		})
	}
}
