package cudabackend

import (
	"os"
	"regexp"
	"testing"

	"github.com/wcache/wcache/plugins/cuda/internal/testkit/fakelib"
	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
	"github.com/wcache/wcache/sdk/backendtest"
)

// TestConformanceInProcess runs the suite without the plugin boundary.
// Every instance shares one Runtime, as the Backends of one process must:
// legacy CUDA IPC cannot open a handle in the process that exported it, so
// the suite's second instance maps the first one's export through the
// Runtime's registry. plugins/cuda's own test runs the suite through real
// plugin processes, where Import goes through the driver.
//
// With WCACHE_CUDA_REAL=1 it uses the real libcuda.so.1 and NVML (and
// WCACHE_CUDA_* from the environment), for the GPU check.
func TestConformanceInProcess(t *testing.T) {
	for _, kind := range []string{HandleIPC, HandleVMMFD} {
		t.Run(kind, func(t *testing.T) { conformanceInProcess(t, kind) })
	}
}

// conformanceInProcess runs the suite with Export producing kind. With
// cuda-vmm-fd every instance imports the descriptors through the driver
// (an import in the exporting process is allowed there).
func conformanceInProcess(t *testing.T, kind string) {
	var cfg Config
	if fakelib.Real(os.Getenv) {
		var err error
		if cfg, err = ConfigFromEnv(os.Getenv); err != nil {
			t.Fatal(err)
		}
	} else {
		// Small staging buffers and slow asynchronous copies: every load
		// of the suite cycles the staging ring many times.
		cfg = fakeConfig(t, gputest.FakeOptions{Env: map[string]string{"FAKECUDA_COPY_DELAY_US": "20"}})
		cfg.Staging.Bytes = 256 << 10
	}
	cfg.Handle = kind
	rt, err := OpenRuntime(cfg, nil)
	if err != nil {
		t.Fatalf("OpenRuntime: %v", err)
	}
	gputest.RunConformance(t, rt, rt.NewBackend,
		backendtest.Options{UUIDPatterns: []*regexp.Regexp{regexp.MustCompile(backendtest.NVIDIAUUIDPattern)}})
}

// TestBackend runs the in-process checks every GPU backend shares
// (gputest.RunBackend) on the fake driver: loads through small staging
// with delayed cuMemcpyHtoDAsync copies, bad extents, cancellation, Close
// during a Load, the paced copy engine, out of memory, a sticky error
// ending the plugin, bad handles.
func TestBackend(t *testing.T) { gputest.RunBackend(t, onFakes()) }
