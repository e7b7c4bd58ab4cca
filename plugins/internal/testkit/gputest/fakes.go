package gputest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/plugins/internal/testkit/fakelib"
)

// FakeOptions choose the fake libraries and settings a vendor backend's
// in-process test opens it with (the vendor's fakeConfig; Fakes.Open).
type FakeOptions struct {
	// Variant is the build of the fake vendor library: "" the full one,
	// else one the package's TestMain built without some entry points.
	Variant string
	// Library, when set, is the vendor library to open instead of the
	// fake (a missing file, say); NoManagement points the management
	// library (NVML, amdsmi) at a missing file.
	Library      string
	NoManagement bool
	// Env is set for the test (t.Setenv) before the fake initialises:
	// the fake reads it then.
	Env map[string]string
	// Staging are the fill settings; the zero Settings stands for the
	// defaults with 64 KiB buffers (many staging cycles in every Load).
	Staging staging.Settings
}

// Libraries sets o.Env for the test and returns the vendor library to
// open, o.Library or else a private copy of the Variant build of the fake
// name in the folder dirEnv names (a copy loads as its own instance,
// which reads this test's variables), and the fake management library
// mgmt of that folder (a missing file with NoManagement). A failed copy
// ends the test.
func (o FakeOptions) Libraries(t testing.TB, dirEnv, name, mgmt string) (lib, mgmtLib string) {
	t.Helper()
	for k, v := range o.Env {
		t.Setenv(k, v)
	}
	dir := os.Getenv(dirEnv)
	lib = o.Library
	if lib == "" {
		var err error
		if lib, err = fakelib.Copy(filepath.Join(dir, o.Variant, name), t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	if o.NoManagement {
		return lib, filepath.Join(t.TempDir(), "absent", mgmt)
	}
	return lib, filepath.Join(dir, mgmt)
}

// StagingSettings returns o.Staging, or for the zero Settings the
// defaults with 64 KiB buffers.
func (o FakeOptions) StagingSettings() staging.Settings {
	if o.Staging != (staging.Settings{}) {
		return o.Staging
	}
	s := staging.DefaultSettings()
	s.Bytes = 64 << 10
	return s
}
