package cudabackend

import (
	"testing"

	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
	"github.com/wcache/wcache/sdk"
)

// loadFile allocates size bytes on device 0 and loads the file at dest.
func loadFile(t *testing.T, b *Backend, path string, n int, size, dest uint64) sdk.AllocationID {
	return gputest.LoadFile(t, b, path, n, size, dest)
}

func TestImportOwnExportSharesTheAllocation(t *testing.T) {
	// Without NVML, FreeMemory is the driver's count (cuMemGetInfo).
	b := newBackend(t, fakeConfig(t, gputest.FakeOptions{NoManagement: true}))
	gputest.CheckImportOwnExport(t, b, b, HandleKind, fakeMemory)
}

func TestImportAcrossProcesses(t *testing.T) {
	cfg := fakeConfig(t, gputest.FakeOptions{})
	gputest.CheckImportAcrossProcesses(t, newBackend(t, cfg), helperEnv, EnvLibrary+"="+cfg.Library, EnvNVMLLibrary+"="+cfg.NVMLLibrary)
}
