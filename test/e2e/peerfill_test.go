package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/test/testproc"
)

// peerFillModel is a checkpoint large enough (about 52 MiB) that the bytes
// a process reads stand out from what it reads anyway (headers, /proc,
// its own sockets).
var peerFillModel = safetensorstest.GenOptions{Layers: 2, HiddenSize: 1024, IntermediateSize: 3072, Shards: 2}

// readChars is what the processes at pids have read with read(2) and
// friends, from any file or socket, the page cache included (testproc.IO's
// RChar: a checkpoint already cached counts too).
func readChars(t *testing.T, pids ...int) (n uint64) {
	t.Helper()
	for _, pid := range pids {
		io, err := testproc.ReadIO(pid)
		if err != nil {
			t.Fatal(err)
		}
		n += io.RChar
	}
	return n
}

// TestPeerFillFromASiblingReadsNoTensorBytes: a second daemon of the same
// user on the node, for the same checkpoint, copies the weights from the
// first daemon's device instead of reading the files: its Status says
// "peer GPU-…" with every byte from the peer and none loaded, a client
// reads the checkpoint's bytes from it (attach --verify too), and neither
// it nor its plugin read anything near the checkpoint's size (the first
// daemon's plugin, which loaded the files, read at least all of it). The
// first daemon serves on and holds no lease of the fill.
func TestPeerFillFromASiblingReadsNoTensorBytes(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2})
	model := genModel(t, filepath.Join(h.Root, "m"), peerFillModel)
	first := h.startServe(0, model.Dir)
	second := h.startServe(1, model.Dir)

	st := h.statusOf(1)
	if want := "peer " + h.UUIDs[0]; st.FilledFrom != want || st.FillFallback != "" ||
		st.StartPhases.BytesFromPeer != model.TotalBytes || st.StartPhases.BytesLoaded != 0 {
		t.Fatalf("second daemon: filled from %q (fallback %q), %d bytes from the peer, %d loaded; want %q, all %d from the peer",
			st.FilledFrom, st.FillFallback, st.StartPhases.BytesFromPeer, st.StartPhases.BytesLoaded, want, model.TotalBytes)
	}
	a, err := h.attachGo(h.UUIDs[1], clientConfig(t, model.Dir))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Lease.Close()
	checkBytes(t, a.Manifest, model, 0)
	h.mustRun("attach", "--backend", "mock", "--gpu-id", "1", "--model", model.Dir, "--verify")

	// The counters after the attaches: what the fill read is in them.
	read := readChars(t, second.PID(), pluginPID(t, second.PID()))
	loaded := readChars(t, pluginPID(t, first.PID()))
	t.Logf("read by the peer-filled daemon and its plugin: %d bytes; by the plugin that loaded the files: %d; checkpoint %d",
		read, loaded, model.TotalBytes)
	if read > model.TotalBytes/8 {
		t.Errorf("the peer-filled daemon and its plugin read %d bytes, the checkpoint has %d", read, model.TotalBytes)
	}
	if loaded < model.TotalBytes {
		t.Errorf("the plugin that loaded the files read %d bytes, less than the checkpoint's %d: the counter proves nothing", loaded, model.TotalBytes)
	}

	if st := h.statusOf(0); st.State != "serving" || len(st.Leases) != 0 || st.FilledFrom != "files" {
		t.Errorf("the sibling: state %s, leases %+v, filled from %q", st.State, st.Leases, st.FilledFrom)
	}
	if res := h.mustRun("status"); !strings.Contains(res.Stdout, "filled from peer "+h.UUIDs[0]) {
		t.Errorf("status does not say where the weights came from:\n%s", res)
	}
	if !strings.Contains(second.Stderr(), "filled from a peer") {
		t.Errorf("the second daemon did not log the peer fill:\n%s", second)
	}
}

// TestPeerFillCarriesTheVerifiedHubBlobNames: for a checkpoint in a
// Hugging Face hub cache, the hub blob names the sibling verified for the
// very files this daemon opened are recorded at the fill: Status lists
// them at once, and the background verifier reads none of the files again
// (its log says so, and the daemon and its plugin read far less than the
// checkpoint).
func TestPeerFillCarriesTheVerifiedHubBlobNames(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2})
	m := genModel(t, filepath.Join(h.Root, "m"), peerFillModel)
	snap := safetensorstest.HubSnapshot(t, filepath.Join(h.Root, "hub", "models--acme--tiny"), "0123456789abcdef0123456789abcdef01234567", m.Dir, nil)
	names := []string{filepath.Base(m.Files[0]), filepath.Base(m.Files[1])}
	h.startServe(0, snap)
	want := waitBlobSums(t, h, 0, names...)
	second := h.startServe(1, snap)
	if err := second.WaitFor(context.Background(), "the blob names checked", readyTimeout, func() bool {
		return strings.Contains(second.Stderr(), "hub blob names checked")
	}); err != nil {
		t.Fatalf("%v\n%s", err, second)
	}
	if out := second.Stderr(); !strings.Contains(out, "verified=0 known_from_peer=2") {
		t.Errorf("the peer-filled daemon verified blob names itself:\n%s", out)
	}
	st := h.statusOf(1)
	if st.FilledFrom != "peer "+h.UUIDs[0] {
		t.Fatalf("filled from %q (fallback %q)", st.FilledFrom, st.FillFallback)
	}
	for i, f := range st.Files {
		if f.SHA256 == "" || f.SHA256 != want[i].SHA256 {
			t.Errorf("%s: blob name %q, the sibling verified %q", f.Name, f.SHA256, want[i].SHA256)
		}
	}
	if read := readChars(t, second.PID(), pluginPID(t, second.PID())); read > m.TotalBytes/8 {
		t.Errorf("the peer-filled daemon and its plugin read %d bytes, the checkpoint has %d", read, m.TotalBytes)
	}
}

// TestPeerFillFallsBackToTheFiles: when no sibling can fill, the daemon
// reads the files, serves the checkpoint's bytes, and says why in Status
// (fill_fallback, "" when no peer fill was tried) and in its log:
// a sibling holding other bytes under the same headers (its files are not
// the files this daemon opened), a copy that fails half-way (the mock
// plugin's fault knob), a sibling killed before the fill (its stale ready
// file is no candidate), and --peer-fill=off.
func TestPeerFillFallsBackToTheFiles(t *testing.T) {
	cases := []struct {
		name string
		// sibling sets up device 0; env and args are device 1's extra.
		sibling func(t *testing.T, h *harness, model *safetensorstest.Result)
		env     []string
		args    []string
		// reason is in fill_fallback ("": none, nothing tried); log in the
		// daemon's output.
		reason, log string
	}{
		{name: "sibling of other content", reason: "not these files", log: "peer fill failed: reading the files instead",
			sibling: func(t *testing.T, h *harness, _ *safetensorstest.Result) {
				opts := peerFillModel
				opts.Seed = 9 // the same headers, other bytes
				h.startServe(0, genModel(t, filepath.Join(h.Root, "finetune"), opts).Dir)
			}},
		{name: "copy error", reason: "injected failure", log: "peer fill failed: reading the files instead",
			sibling: func(t *testing.T, h *harness, model *safetensorstest.Result) { h.startServe(0, model.Dir) },
			env:     []string{"WCACHE_MOCK_FAIL_PEER_COPY_AFTER=8388608"}},
		{name: "sibling gone", log: "peer fill: no peer to fill from",
			sibling: func(t *testing.T, h *harness, model *safetensorstest.Result) {
				d := h.startServe(0, model.Dir)
				plugin := pluginPID(t, d.PID())
				for _, pid := range []int{d.PID(), plugin} {
					if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
				}
				h.waitExit(d, readyTimeout)
				if _, err := os.Stat(h.Paths(h.UUIDs[0]).Ready); err != nil {
					t.Fatalf("the killed sibling's ready file: %v", err)
				}
			}},
		{name: "peer fill off", args: []string{"--peer-fill=off"},
			sibling: func(t *testing.T, h *harness, model *safetensorstest.Result) { h.startServe(0, model.Dir) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{Devices: 2})
			model := genModel(t, filepath.Join(h.Root, "m"), peerFillModel)
			tc.sibling(t, h, model)
			p := h.startWith(func(c *exec.Cmd) { c.Env = append(c.Env, tc.env...) }, serveArgs(1, model.Dir, tc.args...)...)
			h.waitReady(p, h.Paths(h.UUIDs[1]).Ready)
			st := h.statusOf(1)
			if st.FilledFrom != "files" || st.StartPhases.BytesLoaded != model.TotalBytes || st.StartPhases.BytesFromPeer != 0 {
				t.Fatalf("filled from %q, %d bytes loaded, %d from a peer; want the files, %d", st.FilledFrom,
					st.StartPhases.BytesLoaded, st.StartPhases.BytesFromPeer, model.TotalBytes)
			}
			if (tc.reason == "") != (st.FillFallback == "") || !strings.Contains(st.FillFallback, tc.reason) {
				t.Errorf("fill_fallback %q, want %q", st.FillFallback, tc.reason)
			}
			if tc.log != "" && !strings.Contains(p.Stderr(), tc.log) {
				t.Errorf("the daemon's log lacks %q:\n%s", tc.log, p)
			}
			a, err := h.attachGo(h.UUIDs[1], clientConfig(t, model.Dir))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Lease.Close()
			checkBytes(t, a.Manifest, model, 0)
			if tc.reason != "" {
				if res := h.mustRun("status"); !strings.Contains(res.Stdout, "peer fill fell back: ") {
					t.Errorf("status does not show the fallback:\n%s", res)
				}
			}
		})
	}
}

// TestPeerFillOnTheFakeCUDADriver: the same-node fill through the CUDA
// plugin on the fake driver (two devices, cuda-ipc handles): the second
// daemon imports the first's handles and copies device to device, over a
// P2P pair (cuMemcpyPeerAsync) and, with FAKECUDA_NO_P2P, staged through
// its pinned fill buffers; either way Status says "peer GPU-…", the log
// names the path, and attach --verify finds every tensor equal to the files.
func TestPeerFillOnTheFakeCUDADriver(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found: the fake CUDA driver is built with it")
	}
	if _, err := os.Stat(binPath("wcache-backend-cuda")); err != nil {
		t.Skipf("no CUDA plugin built: %v", err)
	}
	root, err := testproc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	lib, err := testproc.BuildFakeCUDA(root, t.TempDir())
	if err != nil {
		t.Fatalf("build the fake CUDA driver: %v", err)
	}
	h := newHarness(t, harnessOptions{Devices: 2})
	h.Setenv(testproc.FakeCUDAEnv(lib, 256<<20, h.UUIDs...)...)
	model := genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{Shards: 2, HiddenSize: 256})
	serve := func(gpu int, env ...string) *process {
		p, err := h.Serve(context.Background(), h.procs, testproc.ServeOptions{Options: testproc.Options{
			Args: testproc.ServeArgs("cuda", gpu, "--model", model.Dir), Env: h.Env(env...)}, UUID: h.UUIDs[gpu], Timeout: readyTimeout})
		if err != nil {
			t.Fatalf("daemon not ready: %v", err)
		}
		return p
	}
	serve(0)
	for _, c := range []struct{ path, env string }{{"p2p", ""}, {"staged", "FAKECUDA_NO_P2P=0-1"}} {
		d := serve(1, c.env)
		st := h.statusOf(1)
		if st.FilledFrom != "peer "+h.UUIDs[0] || st.StartPhases.BytesFromPeer != model.TotalBytes || st.FillFallback != "" {
			t.Errorf("%s: filled from %q (fallback %q), %d bytes from the peer", c.path, st.FilledFrom, st.FillFallback, st.StartPhases.BytesFromPeer)
		}
		if !strings.Contains(d.Stderr(), "path="+c.path) {
			t.Errorf("%s: the log does not name the copy path:\n%s", c.path, d)
		}
		h.mustRun("attach", "--backend", "cuda", "--gpu-id", "1", "--model", model.Dir, "--verify")
		if err := d.Stop(stopGrace); err != nil {
			t.Fatal(err)
		}
	}
}
