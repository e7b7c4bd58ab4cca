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

	"github.com/wcache/wcache/plugins/cuda/cudabackend"
	"github.com/wcache/wcache/plugins/cuda/internal/fakelib"
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
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if !fakelib.Real(os.Getenv) {
		// On the fakes the user's WCACHE_* are not the tests'; on real
		// hardware (the GPU check) they may name the real libraries.
		gputest.ClearUserEnv()
	}
	dir, err := os.MkdirTemp("", "wcache-cuda-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	plugins := os.Getenv(EnvPluginDir)
	if plugins == "" {
		plugins = filepath.Join(dir, "plugins")
		if _, err := backendtest.BuildPlugin(plugins, "cuda", ".", "CGO_ENABLED=1"); err != nil {
			fmt.Fprintf(os.Stderr, "%v\n(or set %s to a folder holding wcache-backend-cuda)\n", err, EnvPluginDir)
			return 2
		}
	}
	os.Setenv(pluginsEnv, plugins)
	if !fakelib.Real(os.Getenv) {
		fakes := filepath.Join(dir, "fakes")
		if err := os.Mkdir(fakes, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		for variant, defines := range map[string][]string{"": nil, "noipcopen": {"FAKECUDA_OMIT_cuIpcOpenMemHandle_v2"}} {
			if _, err := fakelib.CUDA(".", fakes, variant, defines...); err != nil {
				fmt.Fprintln(os.Stderr, "wcache-backend-cuda tests:", err)
				return 2
			}
		}
		if _, err := fakelib.NVML(".", fakes); err != nil {
			fmt.Fprintln(os.Stderr, "wcache-backend-cuda tests:", err)
			return 2
		}
		os.Setenv(fakesEnv, fakes)
	}
	return m.Run()
}

// pluginEnv is the plugin's environment: the fakes (two GPUs, 256 MiB
// each, small staging, slow asynchronous copies) unless WCACHE_CUDA_REAL=1,
// then whatever the environment holds.
func pluginEnv(t *testing.T, variant string, extra ...string) []string {
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
	for name, tc := range map[string]struct {
		env  []string
		want string
	}{
		"missing library": {pluginEnv(t, "", cudabackend.EnvLibrary+"="+missing), "backend unavailable: cannot load " + missing},
		"missing symbol":  {pluginEnv(t, "noipcopen"), "backend unavailable: " + symbolLess + ": missing symbol cuIpcOpenMemHandle_v2"},
	} {
		t.Run(name, func(t *testing.T) {
			b := start(t, tc.env)
			ctx := context.Background()
			info, err := b.Info(ctx)
			if err != nil || info.Platform != "cuda" {
				t.Fatalf("Info = %+v, %v; want the cuda backend's info", info, err)
			}
			_, err = b.Devices(ctx)
			if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Devices = %v, want ErrUnavailable containing %q", err, tc.want)
			}
			_, _, err = b.Allocate(ctx, 0, 4096)
			if !errors.Is(err, sdk.ErrUnavailable) {
				t.Fatalf("Allocate = %v, want ErrUnavailable", err)
			}
		})
	}
}

func TestRunByHandExplains(t *testing.T) {
	cmd := exec.Command(filepath.Join(os.Getenv(pluginsEnv), "wcache-backend-cuda"))
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "wcache backend plugin") {
		t.Fatalf("running the plugin by hand: %v\n%s\nwant exit status 1 and an explanation", err, out)
	}
}
