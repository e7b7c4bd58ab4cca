package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/plugins/cuda/internal/fakelib"
	"github.com/wcache/wcache/plugins/internal/gputest"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

// peerFakes starts wcache-backend-cuda plugins on the fake driver (two
// devices of 256 MiB) for the shared peer-copy checks.
func peerFakes() gputest.PeerFakes {
	return gputest.PeerFakes{
		Start: func(t testing.TB, env ...string) sdk.Backend {
			return backendtest.StartPlugin(t, filepath.Join(os.Getenv(pluginsEnv), "wcache-backend-cuda"), pluginEnv(t, "", env...)...)
		},
		StartNoPeer: func(t testing.TB) sdk.Backend {
			return backendtest.StartPlugin(t, filepath.Join(os.Getenv(pluginsEnv), "wcache-backend-cuda"), pluginEnv(t, "nopeer")...)
		},
		Prefix: "FAKECUDA_", Capacity: 256 << 20,
	}
}

// TestPeerCopyAcrossDevices: a plugin copies device 0 of another plugin
// process into its device 1 with cuMemcpyPeerAsync, and through host
// staging when the fake gives the pair no P2P path.
func TestPeerCopyAcrossDevices(t *testing.T) {
	requireFakes(t)
	gputest.CheckPeerCopyAcrossDevices(t, peerFakes())
}

// TestPeerCopyWithoutEntryPoints: a driver without the peer-copy entry
// points (optional symbols) answers ErrUnsupported, not a crash.
func TestPeerCopyWithoutEntryPoints(t *testing.T) {
	requireFakes(t)
	gputest.CheckPeerCopyWithoutEntryPoints(t, peerFakes())
}

// TestPeerCopyFailureLeavesNothing: a cuMemcpyPeerAsync failing mid-way
// fails the copy and frees its new allocation.
func TestPeerCopyFailureLeavesNothing(t *testing.T) {
	requireFakes(t)
	gputest.CheckPeerCopyFailureLeavesNothing(t, peerFakes(), "CUDA_ERROR_INVALID_VALUE")
}

// BenchmarkPeerCopyPaced reports the fake peer copy's rate over the fake
// copy engine's paced rate (issue 26's third figure; target >= 0.9).
func BenchmarkPeerCopyPaced(b *testing.B) { gputest.BenchPeerCopy(b, peerFakes()) }

// requireFakes skips on the real runtime: the checks set the fake's
// variables (pairs without P2P, injected errors).
func requireFakes(t *testing.T) {
	if fakelib.Real(os.Getenv) {
		t.Skip("the peer-copy checks configure the fake driver")
	}
}
