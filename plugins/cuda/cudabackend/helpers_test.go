package cudabackend

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/plugins/cuda/internal/fakelib"
	"github.com/wcache/wcache/plugins/internal/gputest"
	"github.com/wcache/wcache/sdk/backendtest"
)

// fakeOptions choose the fake libraries for a test.
type fakeOptions struct {
	variant string // fake driver build: "", "nouuidv2", "noipcopen"
	noNVML  bool   // point NVML at a missing file
	staging int    // staging buffer bytes; 0 → 64 KiB
	env     map[string]string
}

// fakeConfig sets opts.env for the test and returns a Config whose driver
// is a private copy of the fake, so that its cuInit reads this test's
// CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER.
func fakeConfig(t testing.TB, opts fakeOptions) Config {
	t.Helper()
	if fakelib.Real(os.Getenv) {
		t.Fatalf("%s=1 runs the conformance tests against the real driver only: select them with -run Conformance", fakelib.EnvReal)
	}
	for k, v := range opts.env {
		t.Setenv(k, v)
	}
	dir := os.Getenv(libDirEnv)
	lib, err := fakelib.Copy(filepath.Join(dir, opts.variant, "libcuda.so.1"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Library = lib
	cfg.NVMLLibrary = filepath.Join(dir, "libnvidia-ml.so.1")
	if opts.noNVML {
		cfg.NVMLLibrary = filepath.Join(t.TempDir(), "absent", "libnvidia-ml.so.1")
	}
	cfg.Staging.Bytes = 64 << 10
	if opts.staging != 0 {
		cfg.Staging.Bytes = opts.staging
	}
	return cfg
}

// newBackend opens a Backend (and its Runtime) closed at cleanup.
func newBackend(t testing.TB, cfg Config) *Backend {
	t.Helper()
	return backendtest.Open(t, func() (*Backend, error) { return New(cfg, nil) })
}

// writeFile writes n deterministic pseudo-random bytes to a new file.
func writeFile(t *testing.T, n int, seed byte) (string, []byte) { return gputest.WriteFile(t, n, seed) }
