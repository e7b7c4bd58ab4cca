package main

import (
	"os"
	"regexp"
	"testing"

	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
	"github.com/wcache/wcache/plugins/rocm/internal/testkit/fakes"
	"github.com/wcache/wcache/plugins/rocm/rocmbackend"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

// EnvPluginDir, when set, names a folder holding a prebuilt
// wcache-backend-rocm; otherwise TestMain builds the plugin.
const EnvPluginDir = "WCACHE_ROCM_PLUGIN_DIR"

func TestMain(m *testing.M) {
	os.Exit(plugin().Main(m, func(dir string) error {
		return fakes.All(".", dir, map[string][]string{"": nil, "noipcopen": {"FAKEHIP_OMIT_hipIpcOpenMemHandle"}, "nopeer": {"FAKEHIP_OMIT_PEER"}})
	}))
}

// plugin is wcache-backend-rocm on the fake HIP and fake amdsmi (two
// GPUs of 256 MiB) unless WCACHE_ROCM_REAL=1, for the checks every GPU
// plugin shares.
func plugin() gputest.Plugin {
	return gputest.Plugin{
		Name: "rocm", PluginDirEnv: EnvPluginDir,
		PluginsEnv: "WCACHE_ROCM_TEST_PLUGINS", FakesEnv: "WCACHE_ROCM_TEST_FAKES", Real: fakes.Real(os.Getenv),
		Info:       sdk.Info{Platform: "rocm", HandleKinds: []string{rocmbackend.HandleKind}},
		LibraryEnv: rocmbackend.EnvLibrary, LibraryName: fakes.HIPName, IPCOpen: "hipIpcOpenMemHandle",
		ManagementEnv: rocmbackend.EnvAMDSMILibrary, ManagementName: fakes.AMDSMIName, StagingBytesEnv: staging.EnvNamesWithPrefix(rocmbackend.EnvPrefix).Bytes,
		FakePrefix: "FAKEHIP_", FakeDevices: "1901ead3a2ecd4a6@c1,2b6c1e0f7d3a9c55@c2", FakeCapacity: 256 << 20, InvalidValue: "hipErrorInvalidValue",
		HealthEnv: rocmbackend.EnvHealthInterval, FatalError: []string{"fatal error", "hipErrorIllegalAddress (700)"},
	}
}

// TestConformanceSubprocess runs the conformance suite through real plugin
// processes: every instance is its own wcache-backend-rocm, so
// ExportImport opens the handle in another process with
// hipIpcOpenMemHandle, as `wcache attach --verify` does.
func TestConformanceSubprocess(t *testing.T) {
	p := plugin()
	env := p.Env(t, "")
	backendtest.Run(t, func(t *testing.T) sdk.Backend {
		return p.Start(t, env)
	}, backendtest.Options{UUIDPatterns: []*regexp.Regexp{regexp.MustCompile(backendtest.AMDUUIDPattern)}})
}

// TestPlugin runs the checks every GPU plugin shares (gputest.RunPlugin):
// run by hand, an unusable runtime, peer copies with hipMemcpyPeerAsync,
// and a fatal HIP error ending the plugin and `wcache serve`.
func TestPlugin(t *testing.T) { gputest.RunPlugin(t, plugin()) }

// BenchmarkPeerCopyPaced reports the fake peer copy's rate over the fake
// copy engine's paced rate (make bench scenario peercopy; target >= 0.9).
func BenchmarkPeerCopyPaced(b *testing.B) { gputest.BenchPeerCopy(b, plugin()) }
