package rocmbackend

import (
	"os"
	"regexp"
	"testing"

	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
	"github.com/wcache/wcache/plugins/rocm/internal/testkit/fakes"
	"github.com/wcache/wcache/sdk/backendtest"
)

// TestConformanceInProcess runs the suite without the plugin boundary.
// Every instance shares one Runtime, as the Backends of one process must:
// HIP cannot open a handle in the process that exported it, so the suite's
// second instance maps the first one's export through the Runtime's
// registry. plugins/rocm's own test runs the suite through real plugin
// processes, where Import goes through hipIpcOpenMemHandle.
//
// With WCACHE_ROCM_REAL=1 it uses the real libraries (and WCACHE_ROCM_*
// from the environment), for a check on AMD hardware.
func TestConformanceInProcess(t *testing.T) {
	var cfg Config
	if fakes.Real(os.Getenv) {
		var err error
		if cfg, err = ConfigFromEnv(os.Getenv); err != nil {
			t.Fatal(err)
		}
	} else {
		cfg = fakeConfig(t, gputest.FakeOptions{Env: map[string]string{"FAKEHIP_COPY_DELAY_US": "20"}})
		cfg.Staging.Bytes = 256 << 10
	}
	rt, err := OpenRuntime(cfg, nil)
	if err != nil {
		t.Fatalf("OpenRuntime: %v", err)
	}
	gputest.RunConformance(t, rt, rt.NewBackend,
		backendtest.Options{UUIDPatterns: []*regexp.Regexp{regexp.MustCompile(backendtest.AMDUUIDPattern)}})
}

// TestBackend runs the in-process checks every GPU backend shares
// (gputest.RunBackend) on the fake HIP: loads through small staging with
// delayed hipMemcpyHtoDAsync copies on device 1, bad extents,
// cancellation, Close during a Load, the paced copy engine, out of
// memory, a fatal error ending the plugin, bad handles.
func TestBackend(t *testing.T) { gputest.RunBackend(t, onFakes()) }
