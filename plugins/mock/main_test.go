package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/plugins/mock/mockbackend"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

// pluginEnv names the binary TestMain builds; an environment variable
// rather than a package variable keeps the package free of mutable globals.
const pluginEnv = "WCACHE_MOCK_TEST_PLUGIN"

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	// The plugin inherits this process's environment: the user's
	// WCACHE_MOCK_* variables are not the tests' (each test sets its own).
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "WCACHE_MOCK_") {
			os.Unsetenv(k)
		}
	}
	dir, err := os.MkdirTemp("", "wcache-mock-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	bin, err := backendtest.BuildPlugin(dir, "mock", ".", "CGO_ENABLED=0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	os.Setenv(pluginEnv, bin)
	return m.Run()
}

// TestConformanceSubprocess runs the conformance suite through the real
// plugin binary: every instance is its own wcache-backend-mock process
// sharing one folder, so ExportImport/RoundTrip opens the handle in another
// process. Both handle kinds: memfd descriptors cross the plugin
// descriptor channel both ways, posix-shm paths the gRPC messages.
func TestConformanceSubprocess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shm")
	for _, kind := range []string{mockbackend.HandleMemfd, mockbackend.HandlePosixShm} {
		t.Run(kind, func(t *testing.T) {
			env := []string{mockbackend.EnvDir + "=" + dir, mockbackend.EnvMemory + "=64MiB", mockbackend.EnvHandle + "=" + kind}
			backendtest.Run(t, func(t *testing.T) sdk.Backend {
				return backendtest.StartPlugin(t, os.Getenv(pluginEnv), env...)
			}, backendtest.Options{})
		})
	}
}

func TestRunByHandExplains(t *testing.T) {
	cmd := exec.Command(os.Getenv(pluginEnv))
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "wcache backend plugin") ||
		!strings.Contains(string(out), "docs/mock-backend.md") {
		t.Fatalf("running the plugin by hand: %v\n%s\nwant exit status 1 and an explanation", err, out)
	}
}
