package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/wcache/wcache/plugins/cuda/cudabackend"
	"github.com/wcache/wcache/plugins/cuda/internal/fakelib"
	"github.com/wcache/wcache/plugins/internal/gputest"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

// EnvPluginDir, when set, names a folder holding a prebuilt
// wcache-backend-cuda (the GPU bundle's bin/); otherwise TestMain builds
// the plugin with `go build`.
const EnvPluginDir = "WCACHE_CUDA_PLUGIN_DIR"

// Folders TestMain fills, passed to tests through the environment so that
// the package keeps no mutable globals.
const (
	pluginsEnv = "WCACHE_CUDA_TEST_PLUGINS"
	fakesEnv   = "WCACHE_CUDA_TEST_FAKES"
)

func TestMain(m *testing.M) {
	os.Exit(gputest.Main(m, gputest.MainOptions{
		Name: "wcache-backend-cuda", Real: fakelib.Real(os.Getenv), Build: func(dir string) error {
			for variant, defines := range map[string][]string{"": nil, "noipcopen": {"FAKECUDA_OMIT_cuIpcOpenMemHandle_v2"}, "nopeer": {"FAKECUDA_OMIT_PEER"}} {
				if _, err := fakelib.CUDA(".", dir, variant, defines...); err != nil {
					return err
				}
			}
			_, err := fakelib.NVML(".", dir)
			return err
		},
		LibDirEnv: fakesEnv, Plugin: "cuda", PluginDirEnv: EnvPluginDir, PluginsEnv: pluginsEnv,
	}))
}

// pluginEnv is the plugin's environment: the fakes (two GPUs, 256 MiB
// each, small staging, slow asynchronous copies) unless WCACHE_CUDA_REAL=1,
// then whatever the environment holds.
func pluginEnv(t testing.TB, variant string, extra ...string) []string {
	t.Helper()
	if fakelib.Real(os.Getenv) {
		return extra
	}
	fakes := os.Getenv(fakesEnv)
	return append([]string{
		cudabackend.EnvLibrary + "=" + filepath.Join(fakes, variant, "libcuda.so.1"),
		cudabackend.EnvNVMLLibrary + "=" + filepath.Join(fakes, "libnvidia-ml.so.1"),
		cudabackend.EnvStagingBytes + "=256KiB",
		"FAKECUDA_DEVICES=2",
		"FAKECUDA_MEMORY=268435456",
		"FAKECUDA_COPY_DELAY_US=20",
	}, extra...)
}

// start starts wcache-backend-cuda through the go-plugin boundary
// (backendtest.StartPlugin), killed at cleanup.
func start(t *testing.T, env []string) sdk.Backend {
	t.Helper()
	return backendtest.StartPlugin(t, filepath.Join(os.Getenv(pluginsEnv), "wcache-backend-cuda"), env...)
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
	for _, kind := range []string{cudabackend.HandleIPC, cudabackend.HandleVMMFD} {
		t.Run(kind, func(t *testing.T) {
			env := pluginEnv(t, "", cudabackend.EnvHandle+"="+kind)
			backendtest.Run(t, func(t *testing.T) sdk.Backend {
				return start(t, env)
			}, backendtest.Options{UUIDPatterns: []*regexp.Regexp{regexp.MustCompile(backendtest.NVIDIAUUIDPattern)}})
		})
	}
}

func TestUnavailableDriverReachesTheHostTyped(t *testing.T) {
	if fakelib.Real(os.Getenv) {
		t.Fatalf("%s=1: only the Conformance tests run against the real driver (-run Conformance)", fakelib.EnvReal)
	}
	missing := filepath.Join(t.TempDir(), "libcuda.so.1")
	symbolLess := filepath.Join(os.Getenv(fakesEnv), "noipcopen", "libcuda.so.1")
	gputest.CheckUnavailableReachesTheHost(t, start, sdk.Info{Platform: "cuda"}, map[string]gputest.Unavailable{
		"missing library": {Env: pluginEnv(t, "", cudabackend.EnvLibrary+"="+missing), Want: "backend unavailable: cannot load " + missing},
		"missing symbol":  {Env: pluginEnv(t, "noipcopen"), Want: "backend unavailable: " + symbolLess + ": missing symbol cuIpcOpenMemHandle_v2"},
	})
}

func TestRunByHandExplains(t *testing.T) {
	gputest.CheckRunByHandExplains(t, filepath.Join(os.Getenv(pluginsEnv), "wcache-backend-cuda"))
}
