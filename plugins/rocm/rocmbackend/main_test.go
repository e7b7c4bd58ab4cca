package rocmbackend

import (
	"fmt"
	"os"
	"testing"

	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
	"github.com/wcache/wcache/plugins/rocm/internal/testkit/fakes"
)

// The physical devices of the fake HIP and fake amdsmi in every test of
// this package (fake amdsmi reads them once per process): two whole GPUs
// and two partitions of a third GPU on one PCI bus (MI300X in DPX mode),
// in KFD node order. devA's unique_id is 1801979520617338022.
const (
	devA       = "GPU-1901ead3a2ecd4a6"
	devB       = "GPU-2b6c1e0f7d3a9c55"
	devP0      = "GPU-77aa00000000f001"
	devP1      = "GPU-77aa00000000f002"
	fakeMemory = 256 << 20
)

// libDirEnv names the folder of the fake libraries TestMain builds.
const libDirEnv = "WCACHE_ROCMBACKEND_TEST_LIBS"

// helperEnv turns the test binary into the importing process of
// TestImportAcrossProcesses.
const helperEnv = "WCACHE_ROCMBACKEND_TEST_HELPER"

func TestMain(m *testing.M) {
	os.Exit(gputest.Main(m, gputest.MainOptions{
		Name: "rocmbackend", HandleKind: HandleKind, HelperEnv: helperEnv, Open: gputest.OpenFromEnv(ConfigFromEnv, New),
		Real: fakes.Real(os.Getenv),
		Build: func(dir string) error {
			return fakes.All("..", dir, map[string][]string{"": nil, "noipcopen": {"FAKEHIP_OMIT_hipIpcOpenMemHandle"}})
		},
		LibDirEnv: libDirEnv,
		Env: map[string]string{
			"FAKEHIP_DEVICES": "1901ead3a2ecd4a6@c1,2b6c1e0f7d3a9c55@c2,77aa00000000f001@21,77aa00000000f002@21",
			"FAKEHIP_MEMORY":  fmt.Sprint(fakeMemory),
		},
	}))
}
