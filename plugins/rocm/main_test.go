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

// start starts wcache-backend-rocm through the go-plugin boundary.
func start(t *testing.T, env []string) sdk.Backend {
	t.Helper()
	return backendtest.StartPlugin(t, filepath.Join(os.Getenv(pluginsEnv), "wcache-backend-rocm"), env...)
}

// TestConformanceSubprocess runs the conformance suite through real plugin
// processes: every instance is its own wcache-backend-rocm, so
// ExportImport opens the handle in another process with
// hipIpcOpenMemHandle, as `wcache attach --verify` does.
func TestConformanceSubprocess(t *testing.T) {
	env := pluginEnv(t, "")
	backendtest.Run(t, func(t *testing.T) sdk.Backend {
		return start(t, env)
	}, backendtest.Options{UUIDPatterns: []*regexp.Regexp{regexp.MustCompile(backendtest.AMDUUIDPattern)}})
}

func TestUnavailableRuntimeReachesTheHostTyped(t *testing.T) {
	if fakes.Real(os.Getenv) {
		t.Skip("needs the fakes")
	}
	missing := filepath.Join(t.TempDir(), "libamdhip64.so.7")
	symbolLess := filepath.Join(os.Getenv(fakesEnv), "noipcopen", fakes.HIPName)
	gputest.CheckUnavailableReachesTheHost(t, start, sdk.Info{Platform: "rocm", HandleKinds: []string{"hip-ipc"}}, map[string]gputest.Unavailable{
		"missing library": {Env: pluginEnv(t, "", rocmbackend.EnvLibrary+"="+missing), Want: "backend unavailable: cannot load " + missing},
		"missing symbol":  {Env: pluginEnv(t, "noipcopen"), Want: "backend unavailable: " + symbolLess + ": missing symbol hipIpcOpenMemHandle"},
	})
}

func TestRunByHandExplains(t *testing.T) {
	gputest.CheckRunByHandExplains(t, filepath.Join(os.Getenv(pluginsEnv), "wcache-backend-rocm"))
}
