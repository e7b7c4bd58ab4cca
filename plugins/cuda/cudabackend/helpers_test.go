package cudabackend

import (
	"os"
	"testing"

	"github.com/wcache/wcache/plugins/cuda/internal/testkit/fakelib"
	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

// fakeConfig returns a Config on the fakes as o says (the fake driver's
// private copy reads this test's CUDA_VISIBLE_DEVICES and
// CUDA_DEVICE_ORDER at cuInit; see gputest.FakeOptions).
func fakeConfig(t testing.TB, o gputest.FakeOptions) Config {
	t.Helper()
	if fakelib.Real(os.Getenv) {
		t.Fatalf("%s=1 runs the conformance tests against the real driver only: select them with -run Conformance", fakelib.EnvReal)
	}
	cfg := DefaultConfig()
	cfg.Library, cfg.NVMLLibrary = o.Libraries(t, libDirEnv, "libcuda.so.1", "libnvidia-ml.so.1")
	cfg.Staging = o.StagingSettings()
	return cfg
}

// newBackend opens a Backend (and its Runtime) closed at cleanup.
func newBackend(t testing.TB, cfg Config) *Backend {
	t.Helper()
	return backendtest.Open(t, func() (*Backend, error) { return New(cfg, nil) })
}

// writeFile writes n deterministic pseudo-random bytes to a new file.
func writeFile(t *testing.T, n int, seed byte) (string, []byte) { return gputest.WriteFile(t, n, seed) }

// onFakes is the backend on the fake driver and fake NVML (fakeConfig)
// for the in-process checks every GPU backend shares (gputest.RunBackend).
// A sticky error (the fake's sticky file) ends the plugin with
// sdk.ExitFatal.
func onFakes() gputest.Fakes[*Backend] {
	return gputest.Fakes[*Backend]{
		Open:    func(t testing.TB, o gputest.FakeOptions) (*Backend, error) { return New(fakeConfig(t, o), nil) },
		Runtime: func(b *Backend) gputest.FatalRuntime { return b.Runtime() },
		Prefix:  "FAKECUDA_", Devices: 3, Capacity: fakeMemory, HandleKind: HandleKind, IPCOpen: "cuIpcOpenMemHandle_v2",
		InitError: 35, InitErrorName: "CUDA_ERROR_INSUFFICIENT_DRIVER",
		OutOfMemory: "CUDA_ERROR_OUT_OF_MEMORY", Fatal: gputest.Fatal{Code: 719, Name: "CUDA_ERROR_LAUNCH_FAILED", Status: sdk.ExitFatal},
	}
}
