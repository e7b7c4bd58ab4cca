package pluginhost

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/internal/procstat"
)

// pluginDirEnv names the folder holding the plugins TestMain builds from
// testdata (wcache-backend-mock from testdata/mockplugin, an sdk/mock
// backend, and wcache-backend-badversion). An environment
// variable rather than a package variable keeps the package free of
// mutable globals.
const pluginDirEnv = "WCACHE_PLUGINHOST_TEST_PLUGINS"

// testCrashExitCode is the exit status of testdata/mockplugin's injected
// crash (WCACHE_MOCK_CRASH_LOAD_AFTER).
const testCrashExitCode = 3

// helperEnv turns the test binary into the helper host of
// TestNoOrphanAfterHostIsKilled.
const helperEnv = "WCACHE_PLUGINHOST_TEST_HELPER"

// testPlugins is the folder of the test plugins.
func testPlugins() string { return os.Getenv(pluginDirEnv) }

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "orphan" {
		os.Exit(orphanHelper())
	}
	dir, err := os.MkdirTemp("", "pluginhost-plugins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for bin, pkg := range map[string]string{
		"wcache-backend-mock":       "./testdata/mockplugin",
		"wcache-backend-badversion": "./testdata/badversion",
	} {
		if err := childproc.GoBuild(filepath.Join(dir, bin), pkg, false); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	if err := os.Setenv(pluginDirEnv, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// mockEnv configures a mock plugin with its own folder and small devices.
func mockEnv(shmDir string, extra ...string) []string {
	return append([]string{"WCACHE_MOCK_DIR=" + shmDir, "WCACHE_MOCK_MEMORY=64MiB"}, extra...)
}

// startMock starts the mock plugin for a test and closes it at cleanup.
func startMock(t *testing.T, shmDir string, extra ...string) *Plugin {
	t.Helper()
	return startMockLogging(t, hclog.NewNullLogger(), shmDir, extra...)
}

// startLoggedMock is startMock (in a folder of its own) with the host's
// log at level kept in the returned buffer.
func startLoggedMock(t *testing.T, level hclog.Level, extra ...string) (*Plugin, *childproc.Buffer) {
	t.Helper()
	out := &childproc.Buffer{}
	logger := hclog.New(&hclog.LoggerOptions{Name: "host", Level: level, Output: out})
	return startMockLogging(t, logger, filepath.Join(t.TempDir(), "shm"), extra...), out
}

func startMockLogging(t *testing.T, logger hclog.Logger, shmDir string, extra ...string) *Plugin {
	t.Helper()
	p, err := Start(t.Context(), "mock", Options{PluginDir: testPlugins(), Logger: logger, Env: mockEnv(shmDir, extra...)})
	if err != nil {
		t.Fatalf("Start(mock): %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// processGone reports whether pid no longer runs (absent or a zombie).
func processGone(pid int) bool { return !procstat.Running(pid) }

// eventually polls cond until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Eventually(t, within, what, cond)
}

// orphanHelper is the host process of TestNoOrphanAfterHostIsKilled: it
// starts the mock, allocates so that a file exists, prints the plugin's pid
// and waits to be killed.
func orphanHelper() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := Start(ctx, "mock", Options{
		PluginDir: os.Getenv("HELPER_PLUGIN_DIR"),
		Logger:    hclog.NewNullLogger(),
		Env:       mockEnv(os.Getenv("HELPER_SHM_DIR")),
		SocketDir: os.Getenv("HELPER_SOCKET_BASE"),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	if _, _, err := p.Backend().Allocate(ctx, 0, 1<<20); err != nil {
		fmt.Fprintln(os.Stderr, "helper: allocate:", err)
		return 1
	}
	fmt.Printf("pid=%d\n", p.PID())
	select {}
}
