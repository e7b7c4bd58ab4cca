package rocmbackend

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/plugins/rocm/internal/fakes"
	"github.com/wcache/wcache/sdk/backendtest"
)

// fakeOptions choose the fake libraries for a test.
type fakeOptions struct {
	variant string // fake HIP build: "" or "noipcopen"
	noSMI   bool   // point amdsmi at a missing file
	staging int    // staging buffer bytes; 0 → 64 KiB
	env     map[string]string
}

// fakeConfig sets opts.env for the test and returns a Config whose HIP is
// a private copy of the fake, so that its initialisation reads this
// test's visibility variables. Sysfs is an empty folder unless the test
// sets SysfsRoot.
func fakeConfig(t testing.TB, opts fakeOptions) Config {
	t.Helper()
	if fakes.Real(os.Getenv) {
		t.Fatalf("%s=1 runs the conformance tests against the real libraries only: select them with -run Conformance", fakes.EnvReal)
	}
	for k, v := range opts.env {
		t.Setenv(k, v)
	}
	dir := os.Getenv(libDirEnv)
	lib, err := fakes.Copy(filepath.Join(dir, opts.variant, fakes.HIPName), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Library = lib
	cfg.AMDSMILibrary = filepath.Join(dir, fakes.AMDSMIName)
	if opts.noSMI {
		cfg.AMDSMILibrary = filepath.Join(t.TempDir(), "absent", fakes.AMDSMIName)
	}
	cfg.SysfsRoot = t.TempDir()
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

// writeKFDNode writes a fixture KFD node under root.
func writeKFDNode(t *testing.T, root string, id int, props string) {
	t.Helper()
	dir := filepath.Join(root, "class", "kfd", "kfd", "topology", "nodes", string(rune('0'+id)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "properties"), []byte(props), 0o644); err != nil {
		t.Fatal(err)
	}
}
