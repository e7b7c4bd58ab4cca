package rocmbackend

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
	"github.com/wcache/wcache/plugins/rocm/internal/testkit/fakes"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

// fakeConfig returns a Config on the fakes as o says (the fake HIP's
// private copy reads this test's visibility variables at initialisation;
// see gputest.FakeOptions). Sysfs is an empty folder unless the test sets
// SysfsRoot.
func fakeConfig(t testing.TB, o gputest.FakeOptions) Config {
	t.Helper()
	if fakes.Real(os.Getenv) {
		t.Fatalf("%s=1 runs the conformance tests against the real libraries only: select them with -run Conformance", fakes.EnvReal)
	}
	cfg := DefaultConfig()
	cfg.Library, cfg.AMDSMILibrary = o.Libraries(t, libDirEnv, fakes.HIPName, fakes.AMDSMIName)
	cfg.SysfsRoot = t.TempDir()
	cfg.Staging = o.StagingSettings()
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

// onFakes is the backend on the fake HIP and fake amdsmi (fakeConfig) for
// the in-process checks every GPU backend shares (gputest.RunBackend).
func onFakes() gputest.Fakes[*Backend] {
	return gputest.Fakes[*Backend]{
		Open:    func(t testing.TB, o gputest.FakeOptions) (*Backend, error) { return New(fakeConfig(t, o), nil) },
		Runtime: func(b *Backend) gputest.FatalRuntime { return b.Runtime() },
		Prefix:  "FAKEHIP_", Devices: 4, Capacity: fakeMemory, HandleKind: HandleKind, IPCOpen: "hipIpcOpenMemHandle",
		InitError: 100, InitErrorName: "hipInit",
		OutOfMemory: "hipErrorOutOfMemory", Fatal: gputest.Fatal{Code: 700, Name: "hipErrorIllegalAddress", Status: sdk.ExitFatal},
	}
}
