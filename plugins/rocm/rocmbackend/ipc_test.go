package rocmbackend

import (
	"testing"

	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
)

// loadFile allocates size bytes on device 0 and loads the file at dest.
func TestImportOwnExportSharesTheAllocation(t *testing.T) {
	// Without amdsmi, FreeMemory is HIP's count (hipMemGetInfo).
	rt, err := OpenRuntime(fakeConfig(t, gputest.FakeOptions{NoManagement: true}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	gputest.CheckImportOwnExport(t, rt.NewBackend(), rt.NewBackend(), HandleKind, fakeMemory)
}

// TestImportAcrossProcesses opens an export in another process through
// hipIpcOpenMemHandle, twice (the fake, like HIP, refcounts the open and
// returns one mapping), and checks the bytes there.
func TestImportAcrossProcesses(t *testing.T) {
	cfg := fakeConfig(t, gputest.FakeOptions{})
	gputest.CheckImportAcrossProcesses(t, newBackend(t, cfg), helperEnv, EnvLibrary+"="+cfg.Library, EnvAMDSMILibrary+"="+cfg.AMDSMILibrary)
}
