package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
)

// newWorld is the end-to-end setup on the fakes (gputest.World) for the
// rocm plugin built by TestMain, with extra in the environment.
func newWorld(t *testing.T, extra ...string) *gputest.World {
	t.Helper()
	return plugin().NewWorld(t, 3<<20+12, extra...)
}

// TestServeThenAttachVerify runs the real `wcache serve --backend rocm`
// on the fake HIP: it loads the checkpoint through the fill pipeline and
// exports hip-ipc handles; `wcache attach --verify` (another process, with
// its own plugin) imports them with hipIpcOpenMemHandle and compares every
// tensor's SHA-256 with the file. Then the daemon stops cleanly on SIGTERM.
func TestServeThenAttachVerify(t *testing.T) {
	w := newWorld(t)
	args := append(append([]string{"serve"}, w.BackendArgs()...), "--gpu-id", "1", "--model", w.Model)
	d := w.Start("serving ", args...)
	sum := w.AttachVerify(1)
	if sum.DeviceUUID != "GPU-2b6c1e0f7d3a9c55" || !sum.Verified || sum.Tensors != 1 {
		t.Fatalf("attach = %+v, want GPU-2b6c1e0f7d3a9c55 verified", sum)
	}
	code, stdout, stderr := w.Run(append(append([]string{"devices"}, w.BackendArgs()...), "--json")...)
	if code != 0 || !strings.Contains(stdout, "GPU-1901ead3a2ecd4a6") || !strings.Contains(stdout, "fake amdsmi") {
		t.Fatalf("devices: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if code := d.Stop(t); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM:\n%s", code, d.Output())
	}
}

// TestLaunchTP2ThenAttachEachRank launches one daemon per GPU for TP=2 and
// verifies each rank's tensors from another process.
func TestLaunchTP2ThenAttachEachRank(t *testing.T) {
	w := newWorld(t)
	args := append(append([]string{"launch"}, w.BackendArgs()...), "--model", w.Model, "--tp-size", "2", "--replicate",
		"--timeout", "60s", "--drain-timeout", "5s", "--stop-grace", "15s")
	d := w.Start("2 daemons ready", args...)
	for rank, want := range []string{"GPU-1901ead3a2ecd4a6", "GPU-2b6c1e0f7d3a9c55"} {
		sum := w.AttachVerify(rank, "--tp-size", "2", "--tp-rank", fmt.Sprint(rank))
		if sum.DeviceUUID != want || !sum.Verified {
			t.Errorf("rank %d: attach = %+v, want %s verified", rank, sum, want)
		}
	}
	if code := d.Stop(t); code != 0 {
		t.Fatalf("launch exited %d after SIGTERM:\n%s", code, d.Output())
	}
}

// TestPublishThenAttachVerify: an empty rocm daemon run with
// --verify-publish hands out writable hip-ipc handles; `wcache publish
// --gpu-id` fills them through its own rocm plugin (which opens them with
// hipIpcOpenMemHandle and loads the files into them) and sends SHA-256s the
// daemon checks on the device; `wcache attach --verify` then finds every
// byte of the files. Without a backend (--device-uuid) publish says why it
// cannot fill hip-ipc handles.
func TestPublishThenAttachVerify(t *testing.T) {
	w := newWorld(t)
	d := w.Start("serving ", append(append([]string{"serve"}, w.BackendArgs()...), "--gpu-id", "0", "--verify-publish")...)
	code, stdout, stderr := w.Run("publish", "--device-uuid", "GPU-1901ead3a2ecd4a6", "--model", w.Model, "--sha256")
	if code != 1 || !strings.Contains(stderr, "hip-ipc") || !strings.Contains(stderr, "--gpu-id") {
		t.Fatalf("publish without a backend: exit %d, want 1 naming hip-ipc and --gpu-id\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = w.Run(append(append([]string{"publish"}, w.BackendArgs()...), "--gpu-id", "0", "--model", w.Model, "--sha256")...)
	if code != 0 || !strings.Contains(stdout, "published 1 tensors") || !strings.Contains(stdout, "verified by the daemon") {
		t.Fatalf("publish through the backend: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if sum := w.AttachVerify(0); sum.DeviceUUID != "GPU-1901ead3a2ecd4a6" || !sum.Verified || sum.Tensors != 1 {
		t.Fatalf("attach after publish = %+v", sum)
	}
	if code := d.Stop(t); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM:\n%s", code, d.Output())
	}
}
