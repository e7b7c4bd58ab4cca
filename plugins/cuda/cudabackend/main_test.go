package cudabackend

import (
	"fmt"
	"os"
	"testing"

	"github.com/wcache/wcache/plugins/cuda/internal/testkit/fakelib"
	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
)

// The physical devices of the fake driver and fake NVML in every test of
// this package (the fake NVML reads them once per process): two GPUs and
// a MIG instance, in PCI bus order.
const (
	devA = "GPU-a0cec0da-0000-4000-8000-000000000000"
	devB = "GPU-a1cec0da-0000-4000-8000-000000000001"
	devM = "MIG-b2cec0da-0000-4000-8000-000000000002"
	// devMPhysical is devM's parent GPU, which cuDeviceGetUuid (v1)
	// reports: the fake inverts the MIG UUID's bytes.
	devMPhysical = "GPU-4d313f25-ffff-bfff-7fff-fffffffffffd"
	fakeMemory   = 256 << 20
)

// libDirEnv names the folder of the fake libraries TestMain builds: an
// environment variable keeps the package free of mutable globals.
const libDirEnv = "WCACHE_CUDABACKEND_TEST_LIBS"

// helperEnv turns the test binary into the importing process of
// TestImportAcrossProcesses.
const helperEnv = "WCACHE_CUDABACKEND_TEST_HELPER"

func TestMain(m *testing.M) {
	os.Exit(gputest.Main(m, gputest.MainOptions{
		Name: "cudabackend", HandleKind: HandleKind, HelperEnv: helperEnv, Open: gputest.OpenFromEnv(ConfigFromEnv, New),
		// The GPU check: conformance against the real driver only.
		Real: fakelib.Real(os.Getenv),
		Build: func(dir string) error {
			return fakelib.All("..", dir, map[string][]string{
				"":          nil,
				"nouuidv2":  {"FAKECUDA_OMIT_cuDeviceGetUuid_v2"},
				"noipcopen": {"FAKECUDA_OMIT_cuIpcOpenMemHandle_v2"},
			})
		},
		LibDirEnv: libDirEnv,
		Env: map[string]string{
			"FAKECUDA_DEVICES": devA + "," + devB + "," + devM,
			"FAKECUDA_MEMORY":  fmt.Sprint(fakeMemory),
		},
	}))
}
