package cudabackend

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/plugins/cuda/internal/fakelib"
	"github.com/wcache/wcache/plugins/internal/gputest"
	"github.com/wcache/wcache/sdk"
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
	if os.Getenv(helperEnv) != "" {
		os.Exit(gputest.ImporterMain(HandleKind, func() (sdk.Backend, func() error, error) {
			cfg, err := ConfigFromEnv(os.Getenv)
			if err != nil {
				return nil, nil, err
			}
			b, err := New(cfg, nil)
			if err != nil {
				return nil, nil, err
			}
			return b, b.Close, nil
		}))
	}
	if fakelib.Real(os.Getenv) {
		// The GPU check: conformance against the real driver only.
		os.Exit(m.Run())
	}
	// On the fakes the user's WCACHE_* are not the tests' (helper
	// processes get theirs from the test).
	gputest.ClearUserEnv()
	dir, err := os.MkdirTemp("", "cudabackend-fakes-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		for variant, defines := range map[string][]string{
			"":          nil,
			"nouuidv2":  {"FAKECUDA_OMIT_cuDeviceGetUuid_v2"},
			"noipcopen": {"FAKECUDA_OMIT_cuIpcOpenMemHandle_v2"},
		} {
			if _, err := fakelib.CUDA(filepath.Join("..", ""), dir, variant, defines...); err != nil {
				fmt.Fprintln(os.Stderr, "cudabackend tests:", err)
				return 2
			}
		}
		if _, err := fakelib.NVML("..", dir); err != nil {
			fmt.Fprintln(os.Stderr, "cudabackend tests:", err)
			return 2
		}
		for k, v := range map[string]string{
			libDirEnv:          dir,
			"FAKECUDA_DEVICES": devA + "," + devB + "," + devM,
			"FAKECUDA_MEMORY":  fmt.Sprint(fakeMemory),
		} {
			os.Setenv(k, v)
		}
		return m.Run()
	}()
	os.Exit(code)
}
