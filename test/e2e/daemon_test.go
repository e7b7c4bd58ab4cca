package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/test/testproc"
)

// startHolder starts a client that attaches to mock GPU gpu and holds the
// lease for 60 s (extra: more attach flags), and waits until it holds it.
func (h *harness) startHolder(gpu int, model string, extra ...string) *process {
	h.t.Helper()
	args := []string{"attach", "--backend", "mock", "--gpu-id", fmt.Sprint(gpu), "--model", model, "--hold", "60s"}
	p := h.start(append(args, extra...)...)
	h.waitOutput(p, "holding lease")
	return p
}

// waitOutput waits until p has written want to stdout.
func (h *harness) waitOutput(p *process, want string) {
	h.t.Helper()
	err := p.WaitFor(context.Background(), fmt.Sprintf("%q on stdout", want), readyTimeout, func() bool {
		return strings.Contains(p.Stdout(), want)
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

// waitLeases waits until `wcache status --json` shows n leases on uuid.
func (h *harness) waitLeases(uuid string, n int) {
	h.t.Helper()
	var res cliResult
	if ok, _ := poll.Until(context.Background(), readyTimeout, func() bool {
		res = h.mustRun("status", "--json")
		var rows []struct {
			DeviceUUID string            `json:"device_uuid"`
			Leases     []json.RawMessage `json:"leases"`
		}
		if err := json.Unmarshal([]byte(res.Stdout), &rows); err != nil {
			h.t.Fatalf("status --json: %v\n%s", err, res)
		}
		for _, r := range rows {
			if r.DeviceUUID == uuid && len(r.Leases) == n {
				return true
			}
		}
		return false
	}); !ok {
		h.t.Fatalf("device %s never had %d lease(s):\n%s", uuid, n, res)
	}
}

// TestStaleFilesAfterKillAreCleanedByNextServe: a SIGKILLed daemon leaves
// its socket and ready file; status calls them stale, a client gets an
// error (not a silent fallback), and the next serve cleans them up.
func TestStaleFilesAfterKillAreCleanedByNextServe(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	p := h.Paths(h.UUIDs[0])
	d := h.startServe(0, model.Dir)
	if err := d.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.waitExit(d, 10*time.Second)
	for _, f := range []string{p.Socket, p.Ready} {
		if _, err := os.Lstat(f); err != nil {
			t.Fatalf("a killed daemon should leave %s behind: %v", f, err)
		}
	}
	res := h.mustRun("status")
	if !strings.Contains(res.Stdout, "stale (dead)") {
		t.Errorf("status does not call the daemon stale:\n%s", res)
	}
	res = h.run("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir)
	if res.Code != 1 || !strings.Contains(res.Stderr, "refused") {
		t.Errorf("attach to a dead daemon's socket: want exit 1 (refused), never a fallback\n%s", res)
	}
	d2 := h.startServe(0, model.Dir)
	if err := d2.WaitOutput(context.Background(), "stale", 10*time.Second); err != nil {
		t.Errorf("the new daemon did not report the stale cleanup: %v\n%s", err, d2)
	}
	h.mustRun("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir, "--verify")
}

// TestLiveDaemonBlocksSecondServeUntilForce: one daemon per GPU; --force
// terminates the live one and takes over.
func TestLiveDaemonBlocksSecondServeUntilForce(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	p := h.Paths(h.UUIDs[0])
	first := h.startServe(0, model.Dir)
	res := h.run(serveArgs(0, model.Dir)...)
	if res.Code != 1 || !strings.Contains(res.Stderr, fmt.Sprintf("pid %d", first.PID())) || !strings.Contains(res.Stderr, "--force") {
		t.Fatalf("second serve: want exit 1 naming pid %d and --force\n%s", first.PID(), res)
	}
	if r, err := daemonfile.ReadReady(p.Ready); err != nil || r.PID != first.PID() {
		t.Fatalf("the refused serve disturbed the ready file: %+v %v", r, err)
	}
	if first.Exited() {
		t.Fatal("the refused serve stopped the live daemon")
	}
	second := h.startServe(0, model.Dir, "--force")
	if code := h.waitExit(first, 30*time.Second); code != 0 {
		t.Errorf("the taken-over daemon exited %d, want 0 (SIGTERM drains and exits cleanly)\n%s", code, first)
	}
	if r, err := daemonfile.ReadReady(p.Ready); err != nil || r.PID != second.PID() {
		t.Fatalf("ready file after takeover: %+v %v", r, err)
	}
	h.mustRun("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir, "--verify")
}

// TestRacingServesExactlyOneWins: two serves started together on one GPU.
func TestRacingServesExactlyOneWins(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	a := h.start(serveArgs(0, model.Dir)...)
	b := h.start(serveArgs(0, model.Dir)...)
	loser, winner := firstToExit(t, "serves", a, b)
	if code := loser.ExitCode(); code != 1 || !strings.Contains(loser.Stderr(), "already running") {
		t.Fatalf("loser exited %d:\n%s", code, loser)
	}
	h.waitReady(winner, h.Paths(h.UUIDs[0]).Ready)
	if winner.Exited() {
		t.Fatalf("the winner exited:\n%s", winner)
	}
}

// TestStopDrainsLeases: a stop with a live lease notifies the client, waits
// for it to release, then the daemon exits cleanly and removes its files.
func TestStopDrainsLeases(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	p := h.Paths(h.UUIDs[0])
	d := h.startServe(0, model.Dir)
	holder := h.startHolder(0, model.Dir)
	res := h.mustRun("stop", "--device-uuid", h.UUIDs[0])
	if !strings.Contains(res.Stdout, "1 lease(s) at stop") {
		t.Errorf("stop output: %s", res)
	}
	if code := h.waitExit(holder, 10*time.Second); code != 0 || !strings.Contains(holder.Stdout(), "notice: draining") {
		t.Errorf("the client did not see the drain notice and release (exit %d):\n%s", code, holder)
	}
	if code := h.waitExit(d, 10*time.Second); code != 0 {
		t.Errorf("daemon exit %d:\n%s", code, d)
	}
	assertGone(t, p.Socket, p.Ready)
	if entries, _ := os.ReadDir(h.MockDir); len(entries) != 0 {
		t.Errorf("device memory not freed: %v", entries)
	}
	if res := h.run("stop", "--device-uuid", h.UUIDs[0]); res.Code != 3 {
		t.Errorf("stopping a stopped daemon: want exit 3\n%s", res)
	}
}

// TestStopTimeoutKeepsServingUntilForce: a client that ignores the drain
// notice makes a stop time out (exit 1, naming the lease) while the daemon
// keeps serving; --force then ends the lease.
func TestStopTimeoutKeepsServingUntilForce(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	d := h.startServe(0, model.Dir)
	holder := h.startHolder(0, model.Dir, "--release-on-drain=false")
	res := h.run("stop", "--device-uuid", h.UUIDs[0], "--timeout", "500ms")
	if res.Code != 1 || !strings.Contains(res.Stderr, fmt.Sprintf("pid %d", holder.PID())) {
		t.Fatalf("stop with a stubborn lease: want exit 1 naming pid %d\n%s", holder.PID(), res)
	}
	if d.Exited() || holder.Exited() {
		t.Fatalf("the daemon must keep serving after a drain timeout:\n%s\n%s", d, holder)
	}
	if res := h.run("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir); res.Code != 0 {
		t.Fatalf("attach after a failed drain: %s", res)
	}
	h.mustRun("stop", "--device-uuid", h.UUIDs[0], "--force")
	if code := h.waitExit(holder, 10*time.Second); code != 1 || !strings.Contains(holder.Stderr(), "lease ended") {
		t.Errorf("a forced stop must end the lease (exit %d):\n%s", code, holder)
	}
	if code := h.waitExit(d, 10*time.Second); code != 0 {
		t.Errorf("daemon exit %d:\n%s", code, d)
	}
}

// TestSIGTERMDrainsThenStops: SIGTERM drains for --drain-timeout, then stops
// anyway and removes the files.
func TestSIGTERMDrainsThenStops(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	p := h.Paths(h.UUIDs[0])
	d := h.startServe(0, model.Dir, "--drain-timeout", "700ms")
	holder := h.startHolder(0, model.Dir, "--release-on-drain=false")
	begin := time.Now()
	if err := d.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := h.waitExit(d, 10*time.Second); code != 0 {
		t.Errorf("daemon exit %d after SIGTERM:\n%s", code, d)
	}
	if waited := time.Since(begin); waited < 700*time.Millisecond {
		t.Errorf("daemon stopped after %s, before its drain timeout", waited)
	}
	if !strings.Contains(holder.Stdout(), "notice: draining") {
		t.Errorf("the lease got no drain notice:\n%s", holder)
	}
	if code := h.waitExit(holder, 10*time.Second); code != 1 {
		t.Errorf("holder exit %d, want 1 (its lease was ended)", code)
	}
	assertGone(t, p.Socket, p.Ready)
}

// TestPluginCrashEndsDaemon: with name handles (posix-shm here, cuda-ipc
// on a GPU) the backend plugin's death takes its memory: the daemon ends
// every lease, removes its files and exits non-zero. (Descriptor handles
// survive it: TestPluginKilledDaemonServesOn.)
func TestPluginCrashEndsDaemon(t *testing.T) {
	h := newHarness(t, shmFileHarness)
	model := genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{})
	p := h.Paths(h.UUIDs[0])
	d := h.startServe(0, model.Dir)
	holder := h.startHolder(0, model.Dir, "--release-on-drain=false")
	plugin, err := testproc.PluginPID(d.PID())
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := h.waitExit(d, 10*time.Second); code == 0 || !strings.Contains(d.Stderr(), "backend plugin exited") {
		t.Errorf("daemon exit %d after its plugin died, want non-zero explaining why:\n%s", code, d)
	}
	if code := h.waitExit(holder, 10*time.Second); code != 1 || !strings.Contains(holder.Stderr(), "backend plugin exited") {
		t.Errorf("the lease must end with the plugin's death (exit %d):\n%s", code, holder)
	}
	assertGone(t, p.Socket, p.Ready)
}

// TestStatusAndCleanup: status lists live daemons with their leases;
// cleanup refuses a live daemon without --force and removes it with it.
func TestStatusAndCleanup(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 2})
	d0 := h.startServe(0, model.Dir)
	h.startServe(1, model.Dir)
	holder := h.startHolder(1, model.Dir)
	h.waitLeases(h.UUIDs[1], 1)
	res := h.mustRun("status")
	for _, want := range []string{h.UUIDs[0], h.UUIDs[1], "serving", fmt.Sprintf("1 (pid %d)", holder.PID())} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, res)
		}
	}
	var rows []struct {
		DeviceUUID string `json:"device_uuid"`
		GPU        int    `json:"gpu"`
		TPRank     uint32 `json:"tp_rank"`
		TPSize     uint32 `json:"tp_size"`
		PPSize     uint32 `json:"pp_size"`
	}
	if err := json.Unmarshal([]byte(h.mustRun("status", "--json").Stdout), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if want := slices.Index(h.UUIDs, r.DeviceUUID); r.GPU != want || r.TPSize != 1 || r.PPSize != 1 || r.TPRank != 0 {
			t.Errorf("status --json row %+v: want gpu %d, tp 0/1, pp size 1", r, want)
		}
	}
	if !strings.Contains(res.Stdout, "GPU") || !strings.Contains(res.Stdout, "0/1") {
		t.Errorf("status table lacks the GPU and TP/PP columns:\n%s", res)
	}
	res = h.run("cleanup", "--device-uuid", h.UUIDs[0])
	if res.Code != 1 || !strings.Contains(res.Stderr, fmt.Sprintf("pid %d", d0.PID())) {
		t.Errorf("cleanup of a live daemon: want exit 1 naming it\n%s", res)
	}
	h.mustRun("cleanup", "--device-uuid", h.UUIDs[0], "--force")
	h.waitExit(d0, 30*time.Second)
	assertGone(t, h.Paths(h.UUIDs[0]).Socket, h.Paths(h.UUIDs[0]).Ready)
	if res := h.run("stop", "--all", "--force"); res.Code != 0 {
		t.Fatalf("%s", res)
	}
	if res := h.mustRun("status"); !strings.Contains(res.Stdout, "no wcache daemons") {
		t.Errorf("status after stop --all:\n%s", res)
	}
}

// TestSignalsDrainWithThePluginAlive: SIGHUP to the daemon, and SIGTERM to
// its whole process group (a terminal's Ctrl-C, `kill -TERM -PGID`), drain
// as SIGTERM does: the plugin, in a group of its own, serves until the
// drain ends, the daemon exits 0, removes its files and ends the plugin.
func TestSignalsDrainWithThePluginAlive(t *testing.T) {
	for _, c := range []struct {
		name  string
		group bool
		sig   syscall.Signal
	}{{"SIGHUP", false, syscall.SIGHUP}, {"SIGTERM to the group", true, syscall.SIGTERM}} {
		t.Run(c.name, func(t *testing.T) {
			h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
			p := h.Paths(h.UUIDs[0])
			d := h.startServe(0, model.Dir, "--drain-timeout", "700ms")
			holder := h.startHolder(0, model.Dir, "--release-on-drain=false")
			plugin, err := testproc.PluginPID(d.PID())
			if err != nil {
				t.Fatal(err)
			}
			if pg, _ := syscall.Getpgid(plugin); pg == d.PID() {
				t.Errorf("the plugin (pid %d) is in the daemon's process group %d", plugin, pg)
			}
			target := d.PID()
			if c.group {
				target = -d.PID() // testproc starts the daemon as its group's leader
			}
			begin := time.Now()
			if err := syscall.Kill(target, c.sig); err != nil {
				t.Fatal(err)
			}
			if code := h.waitExit(d, 10*time.Second); code != 0 || strings.Contains(d.Stderr(), "plugin exited") {
				t.Errorf("daemon exit %d after %s, want 0 after a drain with its plugin alive:\n%s", code, c.name, d)
			}
			if waited := time.Since(begin); waited < 700*time.Millisecond {
				t.Errorf("daemon stopped after %s, before its drain timeout", waited)
			}
			if !strings.Contains(holder.Stdout(), "notice: draining") {
				t.Errorf("the lease got no drain notice:\n%s", holder)
			}
			assertGone(t, p.Socket, p.Ready)
			poll.Eventually(t, 5*time.Second, fmt.Sprintf("plugin %d to end with its daemon", plugin),
				func() bool { return syscall.Kill(plugin, 0) != nil })
		})
	}
}

// TestServeVerifyComparesTheLoad: `serve --verify` hashes every file's
// bytes in the plugin's memory and in the file before it serves.
func TestServeVerifyComparesTheLoad(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	d := h.startServe(0, model.Dir, "--verify")
	h.waitReady(d, h.Paths(h.UUIDs[0]).Ready)
	// The line is logged before the ready file is written, but reaches this
	// process through a pipe: wait for it rather than race it.
	if err := d.WaitOutput(context.Background(), "verified the load against the checkpoint", 10*time.Second); err != nil {
		t.Errorf("serve --verify did not verify: %v\n%s", err, d)
	}
}
