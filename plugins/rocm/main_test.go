package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/wcache/wcache/plugins/internal/gputest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

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

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	if !fakes.Real(os.Getenv) {
		// On the fakes the user's WCACHE_* are not the tests'; on real
		// hardware (the GPU check) they may name the real libraries.
		gputest.ClearUserEnv()
	}
	dir, err := os.MkdirTemp("", "wcache-rocm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	plugins := os.Getenv(EnvPluginDir)
	if plugins == "" {
		plugins = filepath.Join(dir, "plugins")
		if _, err := backendtest.BuildPlugin(plugins, "rocm", ".", "CGO_ENABLED=1"); err != nil {
			fmt.Fprintf(os.Stderr, "%v\n(or set %s to a folder holding wcache-backend-rocm)\n", err, EnvPluginDir)
			return 2
		}
	}
	os.Setenv(pluginsEnv, plugins)
	if !fakes.Real(os.Getenv) {
		f := filepath.Join(dir, "fakes")
		for variant, defines := range map[string][]string{"": nil, "noipcopen": {"FAKEHIP_OMIT_hipIpcOpenMemHandle"}} {
			if _, err := fakes.HIP(".", f, variant, defines...); err != nil {
				fmt.Fprintln(os.Stderr, "wcache-backend-rocm tests:", err)
				return 2
			}
		}
		if _, err := fakes.AMDSMI(".", f); err != nil {
			fmt.Fprintln(os.Stderr, "wcache-backend-rocm tests:", err)
			return 2
		}
		os.Setenv(fakesEnv, f)
	}
	return m.Run()
}

// pluginEnv is the plugin's environment: the fake libraries (variant of
// the fake HIP), two devices of 256 MiB, small staging, delayed copies.
func pluginEnv(t *testing.T, variant string, extra ...string) []string {
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
	for name, tc := range map[string]struct {
		env  []string
		want string
	}{
		"missing library": {pluginEnv(t, "", rocmbackend.EnvLibrary+"="+missing), "backend unavailable: cannot load " + missing},
		"missing symbol":  {pluginEnv(t, "noipcopen"), "backend unavailable: " + symbolLess + ": missing symbol hipIpcOpenMemHandle"},
	} {
		t.Run(name, func(t *testing.T) {
			b := start(t, tc.env)
			ctx := context.Background()
			info, err := b.Info(ctx)
			if err != nil || info.Platform != "rocm" || len(info.HandleKinds) != 1 || info.HandleKinds[0] != "hip-ipc" {
				t.Fatalf("Info = %+v, %v; want the rocm backend's info", info, err)
			}
			_, err = b.Devices(ctx)
			if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Devices = %v, want ErrUnavailable containing %q", err, tc.want)
			}
			if _, _, err = b.Allocate(ctx, 0, 4096); !errors.Is(err, sdk.ErrUnavailable) {
				t.Fatalf("Allocate = %v, want ErrUnavailable", err)
			}
		})
	}
}

func TestRunByHandExplains(t *testing.T) {
	cmd := exec.Command(filepath.Join(os.Getenv(pluginsEnv), "wcache-backend-rocm"))
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "wcache backend plugin") {
		t.Fatalf("running the plugin by hand: %v\n%s\nwant exit status 1 and an explanation", err, out)
	}
}
