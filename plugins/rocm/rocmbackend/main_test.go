package rocmbackend

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/plugins/internal/gputest"
	"github.com/wcache/wcache/plugins/rocm/internal/fakes"
	"github.com/wcache/wcache/sdk"
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
	if fakes.Real(os.Getenv) {
		os.Exit(m.Run())
	}
	// On the fakes the user's WCACHE_* are not the tests' (helper
	// processes get theirs from the test).
	gputest.ClearUserEnv()
	dir, err := os.MkdirTemp("", "rocmbackend-fakes-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		root := filepath.Join("..")
		for variant, defines := range map[string][]string{"": nil, "noipcopen": {"FAKEHIP_OMIT_hipIpcOpenMemHandle"}} {
			if _, err := fakes.HIP(root, dir, variant, defines...); err != nil {
				fmt.Fprintln(os.Stderr, "rocmbackend tests:", err)
				return 2
			}
		}
		if _, err := fakes.AMDSMI(root, dir); err != nil {
			fmt.Fprintln(os.Stderr, "rocmbackend tests:", err)
			return 2
		}
		for k, v := range map[string]string{
			libDirEnv:         dir,
			"FAKEHIP_DEVICES": "1901ead3a2ecd4a6@c1,2b6c1e0f7d3a9c55@c2,77aa00000000f001@21,77aa00000000f002@21",
			"FAKEHIP_MEMORY":  fmt.Sprint(fakeMemory),
		} {
			os.Setenv(k, v)
		}
		return m.Run()
	}()
	os.Exit(code)
}
