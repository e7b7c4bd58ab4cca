// Package e2e runs wcache end to end: the real wcache binary and the real
// mock backend plugin, built once per test run, in real processes talking
// over real Unix sockets.
//
// This file is the shared harness. TestMain builds bin/ (wcache and
// wcache-backend-mock, side by side so that the plugin is found next to the
// executable) into a temporary directory. Every test makes its own harness
// with newHarness: a private XDG_RUNTIME_DIR and XDG_CACHE_HOME, a private WCACHE_MOCK_DIR and
// its own mock device UUIDs, and every process it starts is killed (with its
// whole process group, plugins included) when the test ends.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/test/testproc"
)

// binDirEnv carries the directory of the built binaries from TestMain to the
// tests. An environment variable rather than a package variable keeps the
// package free of mutable globals; it is also the way to reuse binaries that
// were built elsewhere (WCACHE_E2E_BIN=/path/to/bin go test ./test/e2e).
const binDirEnv = "WCACHE_E2E_BIN"

// Binary names inside the bin directory.
const (
	wcacheBin = "wcache"
	mockBin   = "wcache-backend-mock"
)

// Default timeouts of the harness. They are generous because the machine
// running the tests may be busy; a healthy daemon is ready in well under a
// second.
const (
	readyTimeout   = 30 * time.Second
	commandTimeout = 60 * time.Second
	stopGrace      = 10 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if helper := os.Getenv(helperEnv); helper != "" {
		return runHelper(helper)
	}
	if dir := os.Getenv(binDirEnv); dir != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "wcache-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: temp dir: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// Tests run binaries as another uid (nobody) too.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	// The CUDA plugin (cgo, with gcc) for the peer fill on the fake driver.
	if err := testproc.InstallBinaries(dir, binDirEnv, true); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	return m.Run()
}

// binPath is the path of a built binary (wcacheBin, mockBin).
func binPath(name string) string {
	return filepath.Join(os.Getenv(binDirEnv), name)
}

// harnessOptions tunes newHarness.
type harnessOptions struct {
	// Devices is the number of mock devices (default 4).
	Devices int
	// Env is extra environment for every process, "KEY=VALUE".
	Env []string
}

// harness is one test's private world (a testproc.World: Root,
// RuntimeDir, MockDir, UUIDs and the environment) and the processes it
// started.
type harness struct {
	t *testing.T
	*testproc.World
	procs *testproc.Group
}

// newHarness makes a private world for t and registers its cleanup.
func newHarness(t *testing.T, opts harnessOptions) *harness {
	t.Helper()
	if os.Getenv(binDirEnv) == "" {
		t.Fatal("binaries not built: TestMain did not run")
	}
	if opts.Devices == 0 {
		opts.Devices = 4
	}
	w, err := testproc.NewWorld(testproc.WorldOptions{Prefix: "wc", Devices: opts.Devices,
		PluginDir: os.Getenv(binDirEnv), TempDir: true, Keep: []string{binDirEnv}})
	if err != nil {
		t.Fatal(err)
	}
	w.Setenv(opts.Env...)
	h := &harness{t: t, World: w, procs: testproc.NewGroup(testproc.Options{Path: binPath(wcacheBin), Dir: w.Root})}
	t.Cleanup(h.cleanup)
	return h
}

// Paths are the default-layout paths of a device, as the binaries compute
// them in this harness's environment.
func (h *harness) Paths(uuid string) paths.Paths {
	h.t.Helper()
	p, err := h.World.Paths(uuid)
	if err != nil {
		h.t.Fatalf("paths for %s: %v", uuid, err)
	}
	return p
}

// cliResult is the outcome of one wcache command.
type cliResult = testproc.Result

// run runs wcache with args to completion (commandTimeout at most).
func (h *harness) run(args ...string) cliResult {
	h.t.Helper()
	return h.runWith(nil, args...)
}

// runWith runs wcache with args; edit (if not nil) adjusts the command
// before it starts (credentials, extra environment).
func (h *harness) runWith(edit func(*exec.Cmd), args ...string) cliResult {
	h.t.Helper()
	res, err := h.procs.Run(commandTimeout, testproc.Options{Args: args, Env: h.Env(), Edit: edit})
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

// mustRun runs wcache and fails the test unless it exits 0.
func (h *harness) mustRun(args ...string) cliResult {
	h.t.Helper()
	res := h.run(args...)
	if res.Code != 0 {
		h.t.Fatalf("%s", res)
	}
	return res
}

// process is a wcache process running in the background.
type process = testproc.Process

// start starts wcache with args in the background, in a process group of
// its own. The harness stops it when the test ends: SIGTERM, stopGrace, then
// SIGKILL to the whole group (its plugins included).
func (h *harness) start(args ...string) *process {
	h.t.Helper()
	return h.startWith(nil, args...)
}

// startWith is start with a hook to adjust the command before it starts.
func (h *harness) startWith(edit func(*exec.Cmd), args ...string) *process {
	h.t.Helper()
	p, err := h.procs.Start(testproc.Options{Args: args, Env: h.Env(), Edit: edit})
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// cleanup stops every process the harness started and removes its files.
func (h *harness) cleanup() {
	procs := h.procs.Processes()
	for _, p := range h.procs.StopAll(stopGrace) {
		h.t.Logf("process did not stop on SIGTERM, killing it:\n%s", p)
	}
	if h.t.Failed() {
		for _, p := range procs {
			h.t.Logf("%s", p)
		}
	}
	if err := h.Close(); err != nil {
		h.t.Logf("remove %s: %v", h.Root, err)
	}
}

// serveArgs are the arguments of `wcache serve` for the mock device with
// ordinal gpu and the checkpoint in model, followed by extra.
func serveArgs(gpu int, model string, extra ...string) []string {
	return testproc.ServeArgs("mock", gpu, append([]string{"--model", model}, extra...)...)
}

// startServe starts `wcache serve` on mock device gpu and waits until its
// ready file names it. It fails the test if serve exits first.
func (h *harness) startServe(gpu int, model string, extra ...string) *process {
	h.t.Helper()
	p, err := h.Serve(context.Background(), h.procs, testproc.ServeOptions{Options: testproc.Options{
		Args: serveArgs(gpu, model, extra...)}, UUID: h.UUIDs[gpu], Timeout: readyTimeout})
	if err != nil {
		h.t.Fatalf("daemon not ready: %v", err)
	}
	return p
}

// waitReady waits until the ready file at path names p's pid.
func (h *harness) waitReady(p *process, path string) daemonfile.Ready {
	h.t.Helper()
	r, err := p.WaitReady(context.Background(), path, readyTimeout)
	if err != nil {
		h.t.Fatalf("daemon not ready: %v", err)
	}
	return r
}

// waitExit waits for p to exit and returns its code; it fails the test after
// timeout.
func (h *harness) waitExit(p *process, timeout time.Duration) int {
	h.t.Helper()
	code, ok := p.Wait(timeout)
	if !ok {
		h.t.Fatalf("process still running after %s:\n%s", timeout, p)
	}
	return code
}

// newHarnessWithModel is newHarness with a generated checkpoint (default
// options) in h.Root/m: what most tests start from.
func newHarnessWithModel(t *testing.T, opts harnessOptions) (*harness, *safetensorstest.Result) {
	t.Helper()
	h := newHarness(t, opts)
	return h, genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{})
}

// genModel writes a small llama-like checkpoint into dir with
// safetensorstest.GenerateCheckpoint (defaults: 2 layers, hidden size 64,
// BF16, deterministic contents) and fails the test on error. Set
// opts.TPSize for the pre-sharded per-rank layout
// (model-rank-{tp_rank}-part-{i}.safetensors).
func genModel(t *testing.T, dir string, opts safetensorstest.GenOptions) *safetensorstest.Result {
	t.Helper()
	res, err := safetensorstest.GenerateCheckpoint(dir, opts)
	if err != nil {
		t.Fatalf("generate checkpoint in %s: %v", dir, err)
	}
	return res
}

// countFDs is the number of open descriptors of pid.
func countFDs(pid int) (int, error) {
	entries, err := os.ReadDir(filepath.Join("/proc", fmt.Sprint(pid), "fd"))
	if err != nil {
		return 0, err
	}
	return len(entries), nil
}

// assertGone fails the test if any of the paths exists.
func assertGone(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists (lstat: %v)", p, err)
		}
	}
}
