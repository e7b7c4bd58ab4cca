package main

import (
	"os"
	"regexp"
	"testing"

	"github.com/wcache/wcache/plugins/cuda/cudabackend"
	"github.com/wcache/wcache/plugins/cuda/internal/testkit/fakelib"
	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

// EnvPluginDir, when set, names a folder holding a prebuilt
// wcache-backend-cuda (the GPU bundle's bin/); otherwise TestMain builds
// the plugin with `go build`.
const EnvPluginDir = "WCACHE_CUDA_PLUGIN_DIR"

func TestMain(m *testing.M) {
	os.Exit(plugin().Main(m, func(dir string) error {
		return fakelib.All(".", dir, map[string][]string{"": nil, "noipcopen": {"FAKECUDA_OMIT_cuIpcOpenMemHandle_v2"}, "nopeer": {"FAKECUDA_OMIT_PEER"}})
	}))
}

// plugin is wcache-backend-cuda on the fake driver and fake NVML (two
// GPUs of 256 MiB) unless WCACHE_CUDA_REAL=1, for the checks every GPU
// plugin shares.
func plugin() gputest.Plugin {
	return gputest.Plugin{
		Name: "cuda", PluginDirEnv: EnvPluginDir,
		PluginsEnv: "WCACHE_CUDA_TEST_PLUGINS", FakesEnv: "WCACHE_CUDA_TEST_FAKES", Real: fakelib.Real(os.Getenv),
		Info:       sdk.Info{Platform: "cuda"},
		LibraryEnv: cudabackend.EnvLibrary, LibraryName: "libcuda.so.1", IPCOpen: "cuIpcOpenMemHandle_v2",
		ManagementEnv: cudabackend.EnvNVMLLibrary, ManagementName: "libnvidia-ml.so.1", StagingBytesEnv: cudabackend.EnvStagingBytes,
		FakePrefix: "FAKECUDA_", FakeDevices: "2", FakeCapacity: 256 << 20, InvalidValue: "CUDA_ERROR_INVALID_VALUE",
		HealthEnv: cudabackend.EnvHealthInterval, FatalError: []string{"sticky error", "CUDA_ERROR_ILLEGAL_ADDRESS (700)"},
	}
}

// TestConformanceSubprocess runs the conformance suite through real plugin
// processes: every instance is its own wcache-backend-cuda, so
// ExportImport/RoundTrip opens the handle in another process with
// cuIpcOpenMemHandle_v2, as `wcache attach --verify` does. With
// WCACHE_CUDA_REAL=1 the plugins use the real driver.
//
// With cuda-vmm-fd the handles are descriptors: they cross each plugin's
// descriptor channel, and the importing plugin maps them with
// cuMemImportFromShareableHandle in its own process.
func TestConformanceSubprocess(t *testing.T) {
	p := plugin()
	for _, kind := range []string{cudabackend.HandleIPC, cudabackend.HandleVMMFD} {
		t.Run(kind, func(t *testing.T) {
			env := p.Env(t, "", cudabackend.EnvHandle+"="+kind)
			backendtest.Run(t, func(t *testing.T) sdk.Backend {
				return p.Start(t, env)
			}, backendtest.Options{UUIDPatterns: []*regexp.Regexp{regexp.MustCompile(backendtest.NVIDIAUUIDPattern)}})
		})
	}
}

// TestPlugin runs the checks every GPU plugin shares (gputest.RunPlugin):
// run by hand, an unusable driver, peer copies with cuMemcpyPeerAsync, and
// a sticky CUDA error ending the plugin and `wcache serve`.
func TestPlugin(t *testing.T) { gputest.RunPlugin(t, plugin()) }

// BenchmarkPeerCopyPaced reports the fake peer copy's rate over the fake
// copy engine's paced rate (make bench scenario peercopy; target >= 0.9).
func BenchmarkPeerCopyPaced(b *testing.B) { gputest.BenchPeerCopy(b, plugin()) }
