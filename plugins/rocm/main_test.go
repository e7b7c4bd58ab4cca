package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/wcache/wcache/plugins/internal/gputest"
	"github.com/wcache/wcache/plugins/rocm/internal/fakes"
	"github.com/wcache/wcache/plugins/rocm/rocmbackend"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

// EnvPluginDir, when set, names a folder holding a prebuilt
// wcache-backend-rocm; otherwise TestMain builds the plugin.
const EnvPluginDir = "WCACHE_ROCM_PLUGIN_DIR"

// Folders TestMain fills, passed to tests through the environment so that
// the package keeps no mutable globals.
const (
	pluginsEnv = "WCACHE_ROCM_TEST_PLUGINS"
	fakesEnv   = "WCACHE_ROCM_TEST_FAKES"
)

func TestMain(m *testing.M) {
	os.Exit(gputest.Main(m, gputest.MainOptions{
		Name: "wcache-backend-rocm", Real: fakes.Real(os.Getenv), Build: func(dir string) error {
			for variant, defines := range map[string][]string{"": nil, "noipcopen": {"FAKEHIP_OMIT_hipIpcOpenMemHandle"}, "nopeer": {"FAKEHIP_OMIT_PEER"}} {
				if _, err := fakes.HIP(".", dir, variant, defines...); err != nil {
					return err
				}
			}
			_, err := fakes.AMDSMI(".", dir)
			return err
		},
		LibDirEnv: fakesEnv, Plugin: "rocm", PluginDirEnv: EnvPluginDir, PluginsEnv: pluginsEnv,
	}))
}

// pluginEnv is the plugin's environment: the fake libraries (variant of
// the fake HIP), two devices of 256 MiB, small staging, delayed copies.
func pluginEnv(t testing.TB, variant string, extra ...string) []string {
	t.Helper()
	if fakes.Real(os.Getenv) {
		return extra
	}
	f := os.Getenv(fakesEnv)
	return append([]string{
		rocmbackend.EnvLibrary + "=" + filepath.Join(f, variant, fakes.HIPName),
		rocmbackend.EnvAMDSMILibrary + "=" + filepath.Join(f, fakes.AMDSMIName),
		"WCACHE_ROCM_STAGING_BYTES=256KiB",
		"FAKEHIP_DEVICES=1901ead3a2ecd4a6@c1,2b6c1e0f7d3a9c55@c2",
		"FAKEHIP_MEMORY=268435456",
		"FAKEHIP_COPY_DELAY_US=20",
	}, extra...)
}

// plugin is wcache-backend-rocm on the fake HIP and fake amdsmi
// (pluginEnv) for the checks every GPU plugin shares.
func plugin() gputest.Plugin {
	return gputest.Plugin{
		Name: "rocm", PluginsEnv: pluginsEnv, FakesEnv: fakesEnv, Real: fakes.Real(os.Getenv), Env: pluginEnv,
		Info:       sdk.Info{Platform: "rocm", HandleKinds: []string{rocmbackend.HandleKind}},
		LibraryEnv: rocmbackend.EnvLibrary, LibraryName: fakes.HIPName, IPCOpen: "hipIpcOpenMemHandle",
		FakePrefix: "FAKEHIP_", FakeCapacity: 256 << 20, InvalidValue: "hipErrorInvalidValue",
		HealthEnv: rocmbackend.EnvHealthInterval, FatalError: []string{"fatal error", "hipErrorIllegalAddress (700)"},
	}
}

// TestConformanceSubprocess runs the conformance suite through real plugin
// processes: every instance is its own wcache-backend-rocm, so
// ExportImport opens the handle in another process with
// hipIpcOpenMemHandle, as `wcache attach --verify` does.
func TestConformanceSubprocess(t *testing.T) {
	p, env := plugin(), pluginEnv(t, "")
	backendtest.Run(t, func(t *testing.T) sdk.Backend {
		return p.Start(t, env)
	}, backendtest.Options{UUIDPatterns: []*regexp.Regexp{regexp.MustCompile(backendtest.AMDUUIDPattern)}})
}

// TestPlugin runs the checks every GPU plugin shares (gputest.RunPlugin):
// run by hand, an unusable runtime, peer copies with hipMemcpyPeerAsync,
// and a fatal HIP error ending the plugin and `wcache serve`.
func TestPlugin(t *testing.T) { gputest.RunPlugin(t, plugin()) }

// BenchmarkPeerCopyPaced reports the fake peer copy's rate over the fake
// copy engine's paced rate (issue 26's third figure; target >= 0.9).
func BenchmarkPeerCopyPaced(b *testing.B) { gputest.BenchPeerCopy(b, plugin()) }
