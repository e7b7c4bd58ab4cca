package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/sdk/backendtest"
)

// helperEnv makes the test binary run a helper instead of the tests (see
// runHelper); helperSocketEnv names the daemon socket the helper uses.
const (
	helperEnv       = "WCACHE_E2E_HELPER"
	helperSocketEnv = "WCACHE_E2E_HELPER_SOCKET"
)

// runHelper is the test binary acting as an engine that publishes: it
// begins a publish of a small table, fills it, prints "filled" and then
// blocks before the commit until it reads a line on stdin ("commit": it
// commits and prints "published"; end of input: it exits 1 without
// committing). Tests SIGKILL it while it blocks, or let it commit while
// another publisher tries.
func runHelper(name string) int {
	switch name {
	case "fd-fetch":
		return runFDFetchHelper()
	case "fd-write":
		return runFDWriteHelper()
	case "authz-probe":
		return runAuthzProbe()
	case "authz-hold":
		return runAuthzHold()
	}
	if name == "load-or-publish" {
		return runLoadOrPublishHelper()
	}
	if name == "fd-flood" {
		return runFDFloodHelper()
	}
	if name != "publish-hold" {
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", name)
		return 2
	}
	ctx := context.Background()
	c, ok := dialHelperDaemon(ctx, client.Options{ClientName: "publish-hold"})
	if !ok {
		return 1
	}
	defer c.Close()
	in := bufio.NewScanner(os.Stdin)
	res, err := c.Publish(ctx, helperPublication(), func(ctx context.Context, p *client.PublishPlan) ([][]byte, error) {
		sums, err := client.ShmFill(func(i int, dst []byte) error {
			for j := range dst {
				dst[j] = byte(i + j)
			}
			return nil
		}, false)(ctx, p)
		if err != nil {
			return nil, err
		}
		fmt.Println("filled")
		if !in.Scan() || in.Text() != "commit" {
			return nil, fmt.Errorf("told not to commit")
		}
		return sums, nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("published generation %d\n", res.Generation)
	return 0
}

// helperPublication is what the helper publishes.
func helperPublication() client.Publication {
	cfg := cacheconfig.Default()
	cfg.Model, cfg.EngineName, cfg.EngineVersion = "helper/model", "e2e-helper", "1"
	return client.Publication{Config: cfg, Tensors: []client.TensorSpec{
		{Name: "w", DType: "F32", Shape: []uint64{1024}, Length: 4096},
		{Name: "b", DType: "U8", Shape: []uint64{100}, Length: 100},
	}}
}

// dialHelperDaemon dials, for a helper process, the daemon at
// $helperSocketEnv with opts; a failure is printed to stderr and ok is
// false (the helper then exits 1).
func dialHelperDaemon(ctx context.Context, opts client.Options) (c *client.Client, ok bool) {
	c, err := client.Dial(ctx, client.BySocket(os.Getenv(helperSocketEnv)), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return nil, false
	}
	return c, true
}

// startHelper starts the publish-hold helper against the daemon of gpu;
// the returned writer is its stdin.
func (h *harness) startHelper(gpu int) (*process, io.WriteCloser) {
	h.t.Helper()
	return h.startSelf("publish-hold", gpu)
}

// startSelf starts this test binary as the helper of mode (helperEnv)
// against the daemon of gpu, with extra environment env; the returned
// writer is its stdin, closed when the test ends.
func (h *harness) startSelf(mode string, gpu int, env ...string) (*process, io.WriteCloser) {
	h.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		h.t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		h.t.Fatal(err)
	}
	p := h.startWith(func(cmd *exec.Cmd) {
		cmd.Path, cmd.Args = exe, []string{exe}
		cmd.Env = append(append(cmd.Env, helperEnv+"="+mode, helperSocketEnv+"="+h.Paths(h.UUIDs[gpu]).Socket), env...)
		cmd.Stdin = pr
	}, mode)
	pr.Close()
	h.t.Cleanup(func() { pw.Close() })
	return p, pw
}

// startEmpty starts `wcache serve` without a model on mock GPU gpu.
//
// It allows content policy "headers" unless extra names
// --content-policies: these tests publish synthetic tensors under models
// that name no files (helper/model), which only such a daemon serves to an
// attach (docs/cacheconfig.md); files a client names are still checked.
func (h *harness) startEmpty(gpu int, extra ...string) *process {
	h.t.Helper()
	if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--content-policies") }) {
		extra = append(extra, "--content-policies", "identity,hash,headers")
	}
	p := h.start(append([]string{"serve", "--backend", "mock", "--gpu-id", fmt.Sprint(gpu)}, extra...)...)
	h.waitReady(p, h.Paths(h.UUIDs[gpu]).Ready)
	return p
}

// statusRow is the part of `wcache status --json` these tests read.
type statusRow struct {
	DeviceUUID   string `json:"device_uuid"`
	State        string `json:"state"`
	Tensors      int    `json:"tensors"`
	PublisherPID int32  `json:"publisher_pid"`
}

// status returns uuid's row of `wcache status --json`.
func (h *harness) status(uuid string) statusRow {
	h.t.Helper()
	res := h.mustRun("status", "--json")
	var rows []statusRow
	if err := json.Unmarshal([]byte(res.Stdout), &rows); err != nil {
		h.t.Fatalf("status --json: %v\n%s", err, res)
	}
	for _, r := range rows {
		if r.DeviceUUID == uuid {
			return r
		}
	}
	h.t.Fatalf("no status row for %s:\n%s", uuid, res)
	return statusRow{}
}

// waitState polls status until uuid is in state.
func (h *harness) waitState(uuid, state string) statusRow {
	h.t.Helper()
	var r statusRow
	if ok, _ := poll.Until(context.Background(), readyTimeout, func() bool {
		r = h.status(uuid)
		return r.State == state
	}); !ok {
		h.t.Fatalf("device %s is %q, never %q", uuid, r.State, state)
	}
	return r
}

// shmFileHarness is one mock device exporting posix-shm handles: tests
// that count allocations by their files use it (memfds have no name; see
// memfd_test.go for how their memory is accounted).
var shmFileHarness = harnessOptions{Devices: 1, Env: []string{"WCACHE_MOCK_HANDLE=posix-shm"}}

// shmFiles lists the mock's allocation files (posix-shm handles only).
func (h *harness) shmFiles() []string {
	h.t.Helper()
	return backendtest.ShmFiles(h.t, h.MockDir)
}

// TestPublishThenAttachVerify: an empty daemon answers attaches with exit 3
// (load from disk); `wcache publish` fills it from a checkpoint; `wcache
// attach --verify` then finds every byte of the files, and a client of
// another rank is refused field by field.
func TestPublishThenAttachVerify(t *testing.T) {
	h := newHarness(t, shmFileHarness)
	model := genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{Shards: 2})
	h.startEmpty(0, "--verify-publish")
	if r := h.status(h.UUIDs[0]); r.State != "empty" || r.Tensors != 0 {
		t.Fatalf("status of an empty daemon: %+v", r)
	}
	attach := []string{"attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir}
	if res := h.run(attach...); res.Code != 3 || !strings.Contains(res.Stderr, "no cached weights: load from disk") {
		t.Fatalf("attach to an empty daemon: want exit 3, load from disk\n%s", res)
	}
	publish := []string{"publish", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir}
	if res := h.run(publish...); res.Code != 1 || !strings.Contains(res.Stderr, "--verify-publish") {
		t.Fatalf("publish without digests to a --verify-publish daemon: want exit 1 naming the flag\n%s", res)
	}
	if len(h.shmFiles()) != 0 {
		t.Fatalf("a refused publish left allocation files: %v", h.shmFiles())
	}
	res := h.mustRun(append(publish, "--sha256")...)
	if !strings.Contains(res.Stdout, fmt.Sprintf("published %d tensors", len(model.Tensors))) ||
		!strings.Contains(res.Stdout, "verified by the daemon") {
		t.Fatalf("publish output:\n%s", res)
	}
	if r := h.status(h.UUIDs[0]); r.State != "serving" || r.Tensors != len(model.Tensors) {
		t.Fatalf("status after publish: %+v", r)
	}
	res = h.mustRun(append(attach, "--verify")...)
	if !strings.Contains(res.Stdout, fmt.Sprintf("all %d tensors match the files", len(model.Tensors))) {
		t.Fatalf("attach --verify:\n%s", res)
	}
	res = h.run(append(attach, "--tp-size", "2", "--tp-rank", "1")...)
	if res.Code != 4 || !strings.Contains(res.Stderr, "tp_size") || !strings.Contains(res.Stderr, "tp_rank") {
		t.Fatalf("attach as another rank: want exit 4 naming tp_size and tp_rank\n%s", res)
	}
	if res := h.run(append(publish, "--sha256")...); res.Code != 1 || !strings.Contains(res.Stderr, "evict") {
		t.Fatalf("publish over weights: want exit 1 saying evict first\n%s", res)
	}
}

// publishingWorld is an empty daemon on mock GPU 0, a checkpoint, and the
// publish-hold helper blocked between its fill and its commit.
func publishingWorld(t *testing.T) (*harness, *safetensorstest.Result, *process, io.WriteCloser) {
	t.Helper()
	h := newHarness(t, shmFileHarness)
	model := genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{})
	h.startEmpty(0)
	helper, stdin := h.startHelper(0)
	h.waitOutput(helper, "filled")
	return h, model, helper, stdin
}

// TestPublisherKilledMidPublish: a publisher SIGKILLed after it filled and
// before it committed leaves the daemon empty with no allocation behind, and
// the next publish succeeds.
func TestPublisherKilledMidPublish(t *testing.T) {
	h, model, helper, _ := publishingWorld(t)
	if r := h.status(h.UUIDs[0]); r.State != "publishing" || r.PublisherPID != int32(helper.PID()) {
		t.Fatalf("status during a publish: %+v, want publishing by pid %d", r, helper.PID())
	}
	if len(h.shmFiles()) != 1 {
		t.Fatalf("allocation files during the publish: %v, want 1", h.shmFiles())
	}
	if err := helper.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.waitExit(helper, 10*time.Second)
	h.waitState(h.UUIDs[0], "empty")
	if files := h.shmFiles(); len(files) != 0 {
		t.Fatalf("the killed publisher's allocation is still there: %v", files)
	}
	h.mustRun("publish", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir)
	h.mustRun("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir, "--verify")
}

// TestTwoPublishersOneWins: while one client publishes, another of the
// same config is told who (and loads on its own); a publisher of another
// config publishes beside it (a generation of its own, issue 25) and is
// served at once; the first then commits, and the daemon serves both.
func TestTwoPublishersOneWins(t *testing.T) {
	h, model, helper, stdin := publishingWorld(t)
	same, _ := h.startHelper(0)
	if code := h.waitExit(same, 10*time.Second); code != 1 || !strings.Contains(same.Stderr(), fmt.Sprintf("publish in progress by pid %d", helper.PID())) {
		t.Fatalf("second publisher of the same config: want exit 1, publish in progress by pid %d\n%s", helper.PID(), same)
	}
	h.mustRun("publish", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir)
	h.mustRun("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir, "--verify")
	if _, err := io.WriteString(stdin, "commit\n"); err != nil {
		t.Fatal(err)
	}
	if code := h.waitExit(helper, 10*time.Second); code != 0 || !strings.Contains(helper.Stdout(), "published") {
		t.Fatalf("the first publisher did not commit (exit %d):\n%s", code, helper)
	}
	st := h.statusOf(0)
	if st.State != "serving" || len(st.Generations) != 2 {
		t.Fatalf("status after both committed: state %s, %d generations", st.State, len(st.Generations))
	}
	if files := h.shmFiles(); len(files) != 2 {
		t.Errorf("allocation files: %v, want one per generation", files)
	}
}

// TestEvictWaitsForLease: evict never frees under a lease: with a stubborn
// lease it fails naming it and the daemon keeps serving; with a lease that
// ends, it waits for it, then the daemon is empty (files freed) and
// accepts the next publish.
func TestEvictWaitsForLease(t *testing.T) {
	h := newHarness(t, shmFileHarness)
	model := genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{})
	d := h.startServe(0, model.Dir)
	holder := h.startHolder(0, model.Dir, "--release-on-drain=false", "--hold", "3s")
	res := h.run("evict", "--backend", "mock", "--gpu-id", "0", "--timeout", "300ms")
	if res.Code != 1 || !strings.Contains(res.Stderr, fmt.Sprintf("pid %d", holder.PID())) {
		t.Fatalf("evict under a stubborn lease: want exit 1 naming pid %d\n%s", holder.PID(), res)
	}
	if r := h.status(h.UUIDs[0]); r.State != "serving" || len(h.shmFiles()) == 0 {
		t.Fatalf("after a timed-out evict: %+v, files %v", r, h.shmFiles())
	}
	begin := time.Now()
	res = h.mustRun("evict", "--device-uuid", h.UUIDs[0], "--timeout", "30s")
	if code := h.waitExit(holder, time.Second); code != 0 {
		t.Fatalf("holder exit %d:\n%s", code, holder)
	}
	if !strings.Contains(res.Stdout, "1 lease(s) at evict") || time.Since(begin) < time.Second {
		t.Fatalf("evict did not wait for the lease (%s):\n%s", time.Since(begin), res)
	}
	if r := h.status(h.UUIDs[0]); r.State != "empty" || r.Tensors != 0 {
		t.Fatalf("after evict: %+v", r)
	}
	if files := h.shmFiles(); len(files) != 0 {
		t.Fatalf("evict left allocation files: %v", files)
	}
	if d.Exited() {
		t.Fatalf("evict stopped the daemon:\n%s", d)
	}
	h.mustRun("publish", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir)
	h.mustRun("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir, "--verify")
	if res := h.mustRun("evict", "--all"); !strings.Contains(res.Stdout, "evicted") {
		t.Fatalf("evict --all:\n%s", res)
	}
}

// TestLaunchGuardAndEmptyLaunch: a whole checkpoint for TP=2 is refused
// with both ways out; --replicate loads it on both GPUs; without --model
// the launcher starts empty daemons.
func TestLaunchGuardAndEmptyLaunch(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 2})
	base := []string{"launch", "--backend", "mock", "--tp-size", "2", "--timeout", "30s", "--drain-timeout", "2s", "--stop-grace", "10s"}
	res := h.run(append(base, "--model", model.Dir)...)
	if res.Code != 2 || !strings.Contains(res.Stderr, "omit --model") || !strings.Contains(res.Stderr, "--shard-pattern") ||
		!strings.Contains(res.Stderr, "--replicate") {
		t.Fatalf("launch of a whole checkpoint at TP=2: want exit 2 naming both ways out and --replicate\n%s", res)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		state string
	}{
		{"replicate", append(base, "--model", model.Dir, "--replicate"), "serving"},
		{"empty", base, "empty"},
	} {
		p := h.start(tc.args...)
		h.waitLaunchReady(p, h.UUIDs)
		for _, u := range h.UUIDs {
			if r := h.status(u); r.State != tc.state {
				t.Errorf("%s: device %s is %q, want %q", tc.name, u, r.State, tc.state)
			}
		}
		if tc.state == "serving" {
			for gpu := range h.UUIDs {
				h.mustRun("attach", "--backend", "mock", "--gpu-id", fmt.Sprint(gpu), "--model", model.Dir, "--tp-size", "2",
					"--tp-rank", fmt.Sprint(gpu), "--verify")
			}
		}
		h.stopLauncher(p, fmt.Sprintf("%s: launcher", tc.name))
	}
}
