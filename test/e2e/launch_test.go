package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/internal/procstat"
	"github.com/wcache/wcache/test/testproc"
)

// shardPattern selects a rank's files of a pre-sharded checkpoint.
const shardPattern = "model-rank-{tp_rank}-part-*.safetensors"

// launchStopTimeout bounds a launcher's exit after SIGTERM or a failure.
const launchStopTimeout = 30 * time.Second

// launchArgs launches a TP=tp layout of the pre-sharded model on the mock
// backend, followed by extra.
func launchArgs(model string, tp int, extra ...string) []string {
	args := []string{"launch", "--backend", "mock", "--model", model, "--tp-size", fmt.Sprint(tp),
		"--shard-pattern", shardPattern, "--timeout", "30s", "--drain-timeout", "5s", "--stop-grace", "15s"}
	return append(args, extra...)
}

// shardedModel writes a checkpoint pre-sharded for tp ranks into
// h.Root/model and returns its directory.
func shardedModel(t *testing.T, h *harness, tp int) string {
	t.Helper()
	dir := filepath.Join(h.Root, "model")
	genModel(t, dir, safetensorstest.GenOptions{TPSize: tp, Shards: 2})
	return dir
}

// waitLaunchReady waits until the ready file of every device in uuids names
// a child of the launcher p, and until the launcher itself has seen them
// (it printed its table), and returns them in order.
func (h *harness) waitLaunchReady(p *process, uuids []string) []daemonfile.Ready {
	h.t.Helper()
	deadline := time.Now().Add(readyTimeout)
	out := make([]daemonfile.Ready, len(uuids))
	for i := 0; i < len(uuids); {
		r, err := daemonfile.ReadReady(h.Paths(uuids[i]).Ready)
		if err == nil {
			kids, _ := testproc.ChildPIDs(p.PID())
			if slices.Contains(kids, r.PID) {
				out[i] = r
				i++
				continue
			}
		}
		if p.Exited() {
			h.t.Fatalf("launcher exited (code %d) before device %s was ready:\n%s", p.ExitCode(), uuids[i], p)
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("device %s not ready after %s:\n%s", uuids[i], readyTimeout, p)
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.waitOutput(p, fmt.Sprintf("%d daemons ready in", len(uuids)))
	return out
}

// daemonsOf lists the live processes whose command line names model: the
// daemons (and launchers) of this test, whoever their parent is now.
func daemonsOf(model string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range bytes.Split(cmdline, []byte{0}) {
			if string(arg) == "--model="+model && procstat.Running(pid) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// stopLauncher sends p (a launcher, what names it in a failure) SIGTERM
// and fails the test unless it exits 0 within launchStopTimeout.
func (h *harness) stopLauncher(p *process, what string) {
	h.t.Helper()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		h.t.Fatal(err)
	}
	if code := h.waitExit(p, launchStopTimeout); code != 0 {
		h.t.Fatalf("%s exit %d after SIGTERM:\n%s", what, code, p)
	}
}

// assertStderrHas fails the test for each of wants that res's stderr
// lacks.
func assertStderrHas(t *testing.T, res cliResult, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(res.Stderr, want) {
			t.Errorf("stderr lacks %q\n%s", want, res)
		}
	}
}

// firstToExit waits up to readyTimeout for one of two racing processes
// (what: "serves", "launchers") to exit and returns it as the
// loser, the other as the winner; neither exiting fails the test.
func firstToExit(t *testing.T, what string, a, b *process) (loser, winner *process) {
	t.Helper()
	select {
	case <-a.Done():
		return a, b
	case <-b.Done():
		return b, a
	case <-time.After(readyTimeout):
		t.Fatalf("neither of the racing %s gave up:\n%s\n%s", what, a, b)
		return nil, nil
	}
}

// assertAllStopped fails unless every device's ready file and socket are
// gone, the private directory holds only lock files and every process
// started for model has exited within 5 s.
func (h *harness) assertAllStopped(model string) {
	h.t.Helper()
	for _, u := range h.UUIDs {
		assertGone(h.t, h.Paths(u).Ready, h.Paths(u).Socket)
	}
	h.assertNoDiscoveryFiles()
	assertNoDaemons(h.t, model, 5*time.Second)
}

// assertNoDaemons fails unless every process started for model has exited
// within timeout.
func assertNoDaemons(t *testing.T, model string, timeout time.Duration) {
	t.Helper()
	var left []int
	if ok, _ := poll.Until(context.Background(), timeout, func() bool {
		left = daemonsOf(model)
		return len(left) == 0
	}); !ok {
		t.Fatalf("processes of %s still running after %s: %v", model, timeout, left)
	}
}

// assertNoDiscoveryFiles fails if the private directory holds anything but
// lock files (which stay by design).
func (h *harness) assertNoDiscoveryFiles() {
	h.t.Helper()
	dir := filepath.Join(h.RuntimeDir, "wcache")
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		h.t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".lock") {
			h.t.Errorf("%s left in %s", e.Name(), dir)
		}
	}
}

// assertNoMockFiles fails unless the mock backend's folder is empty within
// timeout: every plugin released its shared-memory allocations.
func (h *harness) assertNoMockFiles(timeout time.Duration) {
	h.t.Helper()
	var entries []os.DirEntry
	if ok, _ := poll.Until(context.Background(), timeout, func() bool {
		var err error
		entries, err = os.ReadDir(h.MockDir)
		if err != nil {
			h.t.Fatal(err)
		}
		return len(entries) == 0
	}); !ok {
		names := make([]string, len(entries))
		for i, e := range entries {
			names[i] = e.Name()
		}
		h.t.Fatalf("mock allocation files left in %s after %s: %v", h.MockDir, timeout, names)
	}
}

// TestLaunchTP2ServesEachRankOnItsGPU: the happy path through the real
// binaries. Two daemons on the first two mock GPUs, each with its rank's
// weights; a client per rank attaches and verifies every byte; a client of
// the wrong rank is refused; SIGTERM to the launcher stops both daemons and
// leaves no file and no process behind.
func TestLaunchTP2ServesEachRankOnItsGPU(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 4})
	model := shardedModel(t, h, 2)
	p := h.start(launchArgs(model, 2)...)
	readies := h.waitLaunchReady(p, h.UUIDs[:2])
	for i, r := range readies {
		if r.DeviceUUID != h.UUIDs[i] || r.Socket != h.Paths(h.UUIDs[i]).Socket {
			t.Errorf("GPU %d: ready file %+v, want device %s", i, r, h.UUIDs[i])
		}
	}
	for _, u := range h.UUIDs[2:] {
		assertGone(t, h.Paths(u).Ready, h.Paths(u).Socket)
	}
	h.waitOutput(p, "2 daemons ready")

	for rank := 0; rank < 2; rank++ {
		res := h.mustRun("attach", "--backend", "mock", "--gpu-id", fmt.Sprint(rank), "--model", model,
			"--shard-pattern", shardPattern, "--tp-size", "2", "--tp-rank", fmt.Sprint(rank), "--verify", "--json")
		var sum struct {
			DeviceUUID string `json:"device_uuid"`
			Tensors    int    `json:"tensors"`
			Verified   bool   `json:"verified"`
		}
		if err := json.Unmarshal([]byte(res.Stdout), &sum); err != nil {
			t.Fatalf("attach --json: %v\n%s", err, res)
		}
		if sum.DeviceUUID != h.UUIDs[rank] || !sum.Verified || sum.Tensors == 0 {
			t.Errorf("rank %d attach = %+v, want device %s verified", rank, sum, h.UUIDs[rank])
		}
	}
	// Rank 1's engine process on GPU 0 would get rank 0's weights: refused.
	res := h.run("attach", "--backend", "mock", "--gpu-id", "0", "--model", model,
		"--shard-pattern", shardPattern, "--tp-size", "2", "--tp-rank", "1")
	if res.Code != 4 || !strings.Contains(res.Stderr, "tp_rank") {
		t.Errorf("attach of rank 1 to GPU 0: want exit 4 naming tp_rank\n%s", res)
	}

	h.stopLauncher(p, "launcher")
	if !strings.Contains(p.Stderr(), "all 2 daemons stopped cleanly") {
		t.Errorf("launcher did not report a clean stop:\n%s", p.Stderr())
	}
	for i, r := range readies {
		if procstat.Running(r.PID) {
			t.Errorf("daemon of GPU %d (pid %d) still running", i, r.PID)
		}
		assertGone(t, h.Paths(h.UUIDs[i]).Ready, h.Paths(h.UUIDs[i]).Socket)
	}
	h.assertNoDiscoveryFiles()
	assertNoDaemons(t, model, 5*time.Second)
}

// TestLaunchDaemonFailureStopsSiblings: rank 1's shard is corrupt, so only
// the daemon of GPU 1 fails while loading; the launcher stops the daemon of
// GPU 0 (still loading, slowed down by the mock) and names the one that
// failed, with its exit status and last output.
func TestLaunchDaemonFailureStopsSiblings(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2, Env: []string{"WCACHE_MOCK_LOAD_DELAY=20s"}})
	model := shardedModel(t, h, 2)
	bad := filepath.Join(model, "model-rank-1-part-1.safetensors")
	st, err := os.Stat(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(bad, st.Size()-1); err != nil {
		t.Fatal(err)
	}
	res := h.run(launchArgs(model, 2)...)
	if res.Code != 1 {
		t.Fatalf("launch with a corrupt rank-1 shard: want exit 1\n%s", res)
	}
	// Stopped, not waited for: the healthy daemon never finished its
	// (20 s) load.
	for _, line := range strings.Split(res.Stderr, "\n") {
		if strings.HasPrefix(line, "[gpu 0 tp 0 pp 0] ") && (strings.Contains(line, "ready:") || strings.Contains(line, "loaded:")) {
			t.Errorf("the healthy daemon finished loading: the launcher waited for it instead of stopping it: %q\n%s", line, res)
		}
	}
	assertStderrHas(t, res,
		"launch failed", "daemon for gpu 1 tp 1 pp 0 ("+h.UUIDs[1], "exited before it was ready", "exit status 1",
		"its last output", "model-rank-1-part-1.safetensors",
		"gpu 1 tp 1 pp 0: daemon exited before it was ready; stopping the other daemons",
	)
	// The healthy daemon had started and was stopped. (Whether it logged
	// first is a race: rank 1 can fail its checkpoint check before rank 0
	// prints a line.)
	if !regexp.MustCompile(`gpu 0 tp 0 pp 0: started daemon pid [0-9]+ for ` + regexp.QuoteMeta(h.UUIDs[0])).MatchString(res.Stderr) {
		t.Errorf("the launcher did not start the daemon of GPU 0:\n%s", res)
	}
	h.assertAllStopped(model)
}

// sawReady reports whether the launcher's stderr says that the daemon of
// rank (as the launcher prints it: "gpu 0 tp 0 pp 0") became ready.
func sawReady(stderr, rank string) bool {
	return regexp.MustCompile(regexp.QuoteMeta(rank) + `: daemon pid [0-9]+ ready in `).MatchString(stderr)
}

// TestLaunchPluginLoadFailureOnOneGPUStopsSiblings: the failure happens
// inside the backend plugin's Load of exactly one daemon. Every daemon starts
// its own mock plugin with the same environment; WCACHE_MOCK_FAULT_DEVICES
// limits the injected failure (and a 1 s delay before it, so that the
// sibling is serving by then) to GPU 1. The launcher names GPU 1, its rank
// and the plugin's error, stops the serving daemon of GPU 0 cleanly, and
// nothing is left: no process, no discovery file, no shared memory.
func TestLaunchPluginLoadFailureOnOneGPUStopsSiblings(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2})
	h.Setenv("WCACHE_MOCK_FAIL_LOAD_AFTER=0", "WCACHE_MOCK_LOAD_DELAY=1s",
		"WCACHE_MOCK_FAULT_DEVICES="+h.UUIDs[1])
	model := shardedModel(t, h, 2)
	res := h.run(launchArgs(model, 2)...)
	if res.Code != 1 {
		t.Fatalf("launch with a failing plugin on GPU 1: want exit 1\n%s", res)
	}
	assertStderrHas(t, res,
		"launch failed", "daemon for gpu 1 tp 1 pp 0 ("+h.UUIDs[1], "exited before it was ready", "exit status 1",
		"its last output", "injected failure after 0 bytes by WCACHE_MOCK_FAIL_LOAD_AFTER",
		"gpu 1 tp 1 pp 0: daemon exited before it was ready; stopping the other daemons",
	)
	// The sibling loaded normally (the knob did not reach its plugin) and
	// was serving when the launcher stopped it.
	if !sawReady(res.Stderr, "gpu 0 tp 0 pp 0") {
		t.Errorf("the daemon of GPU 0 never became ready\n%s", res)
	}
	// Only GPU 1 is blamed, and the sibling stopped cleanly on SIGTERM.
	for _, unwanted := range []string{"daemon for gpu 0", "did not all stop cleanly"} {
		if strings.Contains(res.Stderr, unwanted) {
			t.Errorf("stderr has %q\n%s", unwanted, res)
		}
	}
	h.assertAllStopped(model)
	h.assertNoMockFiles(5 * time.Second)
}

// TestLaunchReadyTimeoutNamesTheSlowGPU: only GPU 1's plugin loads slower
// than --timeout (WCACHE_MOCK_LOAD_DELAY limited by
// WCACHE_MOCK_FAULT_DEVICES, here by ordinal). The launcher names GPU 1 as
// pending, not the ready GPU 0, and stops both.
func TestLaunchReadyTimeoutNamesTheSlowGPU(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2,
		Env: []string{"WCACHE_MOCK_LOAD_DELAY=60s", "WCACHE_MOCK_FAULT_DEVICES=1"}})
	model := shardedModel(t, h, 2)
	res := h.run(launchArgs(model, 2, "--timeout", "2s")...)
	if res.Code != 1 {
		t.Fatalf("want exit 1\n%s", res)
	}
	assertStderrHas(t, res, "timed out waiting for daemons to be ready after 2s: 1 of them pending",
		"daemon for gpu 1 tp 1 pp 0 ("+h.UUIDs[1], "not ready in time")
	if !sawReady(res.Stderr, "gpu 0 tp 0 pp 0") {
		t.Errorf("the daemon of GPU 0 never became ready\n%s", res)
	}
	if strings.Contains(res.Stderr, "daemon for gpu 0") {
		t.Errorf("the ready GPU 0 is named as pending\n%s", res)
	}
	h.assertAllStopped(model)
	h.assertNoMockFiles(5 * time.Second)
}

// TestLaunchKilledLauncherLeavesNoDaemon: SIGKILL cannot be caught, but
// the daemons' parent-death signal (SIGTERM) stops them: no daemon outlives
// its launcher. Their stderr is a pipe whose only reader was the launcher,
// so once it is gone every log line fails with EPIPE; a daemon that did not
// ignore SIGPIPE would die at its first one and leave its socket and ready
// file. A client holds a lease on GPU 0, so that daemon drains for
// --drain-timeout and logs that the drain timed out well after the pipe
// lost its reader. Each daemon must still end its leases, remove its own
// files and release its plugin's memory. The next launch then serves.
func TestLaunchKilledLauncherLeavesNoDaemon(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2})
	model := shardedModel(t, h, 2)
	p := h.start(launchArgs(model, 2, "--drain-timeout", "1s")...)
	readies := h.waitLaunchReady(p, h.UUIDs[:2])
	holder := h.startHolder(0, model, "--shard-pattern", shardPattern, "--tp-size", "2", "--tp-rank", "0",
		"--release-on-drain=false")
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.waitExit(p, 5*time.Second)
	assertNoDaemons(t, model, launchStopTimeout)
	for _, r := range readies {
		if procstat.Running(r.PID) {
			t.Errorf("daemon pid %d survived its launcher", r.PID)
		}
	}
	// Nobody but the daemons themselves removed these: the launcher is
	// dead and no other wcache process ran since.
	for i, u := range h.UUIDs[:2] {
		pp := h.Paths(u)
		if _, err := os.Lstat(pp.Socket); err == nil {
			t.Errorf("daemon of GPU %d (pid %d) left its socket %s: it did not shut down cleanly", i, readies[i].PID, pp.Socket)
		}
		assertGone(t, pp.Ready, pp.Socket)
	}
	h.assertNoDiscoveryFiles()
	h.assertNoMockFiles(5 * time.Second)
	// The held lease was ended by the daemon, not left hanging.
	if _, ok := holder.Wait(10 * time.Second); !ok {
		t.Errorf("the lease holder still runs after its daemon stopped:\n%s", holder)
	}

	again := h.start(launchArgs(model, 2)...)
	h.waitLaunchReady(again, h.UUIDs[:2])
	h.stopLauncher(again, "second launch")
	h.assertNoDiscoveryFiles()
}

// TestLaunchRaceOnOneGPUExactlyOneWins: two launchers started together on
// GPU 0; the identity lock lets one daemon load, the other launcher fails
// and leaves the winner alone.
func TestLaunchRaceOnOneGPUExactlyOneWins(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1, Env: []string{"WCACHE_MOCK_LOAD_DELAY=300ms"}})
	model := shardedModel(t, h, 1)
	a := h.start(launchArgs(model, 1)...)
	b := h.start(launchArgs(model, 1)...)
	loser, winner := firstToExit(t, "launchers", a, b)
	if code := loser.ExitCode(); code != 1 || !strings.Contains(loser.Stderr(), "another wcache launch is running") &&
		!strings.Contains(loser.Stderr(), "already running for device "+h.UUIDs[0]) {
		t.Fatalf("loser: exit %d, want 1 naming the other launch or the live daemon:\n%s", code, loser)
	}
	r := h.waitLaunchReady(winner, h.UUIDs[:1])[0]
	if winner.Exited() {
		t.Fatalf("the winner exited too:\n%s", winner)
	}
	h.stopLauncher(winner, "winner")
	if procstat.Running(r.PID) {
		t.Errorf("winner's daemon %d still running", r.PID)
	}
	assertNoDaemons(t, model, 5*time.Second)
}

// TestLaunchRaceOverTwoGPUsLeavesTheWinnerServing: two launchers of a TP=2
// layout started together over the same two GPUs, several rounds. Without
// a layout-wide lock each could win one GPU's identity lock, see the other's
// daemon on the second GPU and stop its own: both failed with nothing
// serving. Now exactly one fails, before it touches anything, and the
// other serves both GPUs until it is stopped.
func TestLaunchRaceOverTwoGPUsLeavesTheWinnerServing(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2, Env: []string{"WCACHE_MOCK_LOAD_DELAY=200ms"}})
	model := shardedModel(t, h, 2)
	for round := range 4 {
		a := h.start(launchArgs(model, 2)...)
		b := h.start(launchArgs(model, 2)...)
		loser, winner := firstToExit(t, fmt.Sprintf("launchers (round %d)", round), a, b)
		if code := loser.ExitCode(); code != 1 {
			t.Fatalf("round %d: loser exit %d, want 1:\n%s", round, code, loser)
		}
		ready := h.waitLaunchReady(winner, h.UUIDs[:2])
		if winner.Exited() {
			t.Fatalf("round %d: both launchers failed, nothing serves:\n%s\n%s", round, winner, loser)
		}
		for _, r := range ready {
			if !procstat.Running(r.PID) {
				t.Fatalf("round %d: the winner's daemon %d is gone", round, r.PID)
			}
		}
		h.stopLauncher(winner, fmt.Sprintf("round %d: winner", round))
		assertNoDaemons(t, model, 5*time.Second)
	}
}

// TestLaunchRefusesLiveDaemonUnlessForced: a daemon already serving GPU 0
// is named and left alone; with --force the launcher takes over.
func TestLaunchRefusesLiveDaemonUnlessForced(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2})
	model := shardedModel(t, h, 2)
	serve := h.startServe(0, model, "--shard-pattern", shardPattern, "--tp-size", "2", "--tp-rank", "0")

	res := h.run(launchArgs(model, 2)...)
	if res.Code != 1 {
		t.Fatalf("launch over a live daemon: want exit 1\n%s", res)
	}
	assertStderrHas(t, res, fmt.Sprintf("pid %d", serve.PID()), h.UUIDs[0], "--force")
	if serve.Exited() {
		t.Fatalf("the refused launch stopped the live daemon:\n%s", serve)
	}
	assertGone(t, h.Paths(h.UUIDs[1]).Ready) // nothing was started

	p := h.start(launchArgs(model, 2, "--force")...)
	h.waitLaunchReady(p, h.UUIDs[:2])
	h.waitExit(serve, launchStopTimeout)
	if err := p.WaitOutput(context.Background(), fmt.Sprintf("stopped live daemon pid %d (--force)", serve.PID()), 10*time.Second); err != nil {
		t.Errorf("launcher did not report the takeover: %v\n%s", err, p.Stderr())
	}
	h.stopLauncher(p, "launcher")
	h.assertNoDiscoveryFiles()
}

// TestLaunchRefusesTemplateWithoutUUID: a template without {device_uuid}
// would give every GPU one socket; refused before anything is created.
func TestLaunchRefusesTemplateWithoutUUID(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2})
	model := shardedModel(t, h, 2)
	res := h.run(launchArgs(model, 2, "--socket-template", filepath.Join(h.Root, "wcache.sock"))...)
	if res.Code != 2 || !strings.Contains(res.Stderr, "--socket-template") || !strings.Contains(res.Stderr, "{device_uuid}") {
		t.Fatalf("want exit 2 naming the flag and the placeholder\n%s", res)
	}
	for _, dir := range []string{h.RuntimeDir, h.MockDir} {
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s is not empty after a refused launch", dir)
		}
	}
	assertGone(t, filepath.Join(h.Root, "wcache.sock"))
}

// TestLaunchSurvivesLostStderr: the launcher's stderr is a pipe nobody
// reads any more (a closed terminal, a killed `| tee`). The launcher must
// keep supervising, and stop its daemons cleanly on SIGTERM, instead of
// dying of SIGPIPE at its next log line and taking the layout with it.
func TestLaunchSurvivesLostStderr(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2})
	model := shardedModel(t, h, 2)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	p := h.startWith(func(c *exec.Cmd) { c.Stderr = w }, launchArgs(model, 2)...)
	w.Close()
	h.waitLaunchReady(p, h.UUIDs[:2])
	h.stopLauncher(p, "launcher with a broken stderr")
	assertNoDaemons(t, model, 5*time.Second)
	h.assertNoDiscoveryFiles()
}
