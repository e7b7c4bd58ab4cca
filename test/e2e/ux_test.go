package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLaunchThenStopAllIsClean: the README's `launch`, then `stop --all`,
// is a requested stop: the launcher exits 0 (under systemd or Kubernetes an
// exit 1 reads as a crash) and leaves no discovery file.
func TestLaunchThenStopAllIsClean(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2})
	model := shardedModel(t, h, 2)
	p := h.start(launchArgs(model, 2)...)
	h.waitLaunchReady(p, h.UUIDs)
	if res := h.run("stop", "--all"); res.Code != 0 {
		t.Fatalf("stop --all: %s", res)
	}
	if code := h.waitExit(p, launchStopTimeout); code != 0 {
		t.Fatalf("launcher exited %d after stop --all, want 0:\n%s", code, p)
	}
	if strings.Contains(p.Output(), "exited while serving") {
		t.Errorf("the launcher reports a requested stop as a death:\n%s", p)
	}
	assertNoDaemons(t, model, launchStopTimeout)
	h.assertNoDiscoveryFiles()
}

// TestProgressOutput: without a terminal serve logs a "loading" line with
// percent, bytes, rate (as JSON with --log-format json); on a terminal
// (script(1) gives the command one) attach --verify draws a bar, and
// without one it logs "verifying" lines.
func TestProgressOutput(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 2})
	text := h.startServe(0, model.Dir)
	if s := text.Stderr(); !strings.Contains(s, "loading: percent=100") || !strings.Contains(s, "rate=") {
		t.Errorf("serve without a terminal: no loading line at 100%% with a rate:\n%s", s)
	}
	js := h.startServe(1, model.Dir, "--log-format", "json")
	found := false
	for _, l := range strings.Split(js.Stderr(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) == nil && rec["@message"] == "loading" && rec["percent"] == float64(100) {
			found = true
		}
		if l != "" && !strings.HasPrefix(l, "{") {
			t.Errorf("serve --log-format json wrote a line that is not JSON: %q", l)
		}
	}
	if !found {
		t.Errorf("serve --log-format json: no JSON loading record at 100%%:\n%s", js.Stderr())
	}
	attach := []string{"attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir, "--verify"}
	if res := h.mustRun(attach...); !strings.Contains(res.Stderr, "verifying: percent=100") {
		t.Errorf("attach --verify without a terminal: no verifying line:\n%s", res)
	}
	res := h.runWith(underTerminal(t), attach...)
	if res.Code != 0 || !strings.Contains(res.Stdout, "verifying 100%") || !strings.Contains(res.Stdout, "all ") {
		t.Errorf("attach --verify on a terminal: want a bar at 100%% and the summary:\n%s", res)
	}
}

// underTerminal runs the command under script(1) (util-linux, in every
// Debian), which gives it a pseudo-terminal as stdin, stdout and stderr
// and copies what it writes to script's stdout.
func underTerminal(t *testing.T) func(*exec.Cmd) {
	t.Helper()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Fatalf("script(1) (util-linux) is needed to give wcache a terminal: %v", err)
	}
	return func(cmd *exec.Cmd) {
		quoted := make([]string, len(cmd.Args))
		for i, a := range cmd.Args {
			if i == 0 {
				a = cmd.Path
			}
			quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		cmd.Path, cmd.Args = script, []string{"script", "-qec", strings.Join(quoted, " "), "/dev/null"}
	}
}

// TestStatusShowsDraining: while a stop waits for a lease, status (table
// and JSON) says "draining"; once the client lets go the stop completes.
func TestStatusShowsDraining(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	d := h.startServe(0, model.Dir)
	holder := h.startHolder(0, model.Dir, "--release-on-drain=false")
	stop := h.start("stop", "--device-uuid", h.UUIDs[0], "--timeout", "20s")
	h.waitState(h.UUIDs[0], "draining")
	if res := h.mustRun("status"); !strings.Contains(res.Stdout, "draining") || !strings.Contains(res.Stdout, "STATE") {
		t.Errorf("status table during a drain:\n%s", res)
	}
	if err := holder.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := h.waitExit(stop, 20*time.Second); code != 0 {
		t.Errorf("stop exited %d once the lease was released:\n%s", code, stop)
	}
	if code := h.waitExit(d, 10*time.Second); code != 0 {
		t.Errorf("daemon exit %d:\n%s", code, d)
	}
}

// TestAnotherUserIsToldHowToShare: an engine running as another uid finds
// no daemon under its own runtime directory. `wcache attach` says so,
// lists the daemon of the other user (root's) by pid and says how it is
// shared (--socket-group, --allow-uid); `wcache status` lists it too.
func TestAnotherUserIsToldHowToShare(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the CLI as uid 65534 (SysProcAttr.Credential)")
	}
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	d := h.startServe(0, model.Dir)
	run := filepath.Join(h.Root, "nobody-run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(run, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(h.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(model.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := func(args ...string) (string, int) {
		cmd := exec.Command(binPath(wcacheBin), args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "XDG_RUNTIME_DIR=" + run, "HOME=" + run}
		for _, kv := range h.Env() {
			if strings.HasPrefix(kv, "WCACHE_MOCK_") || strings.HasPrefix(kv, "WCACHE_PLUGIN_DIR=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		var xe *exec.ExitError
		if err != nil && !errors.As(err, &xe) {
			t.Fatalf("wcache %v as uid %d: %v", args, nobody, err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	want := []string{fmt.Sprintf("pid %d, uid 0: wcache serve", d.PID()), "--socket-group GROUP --allow-uid 65534", "WCACHE_SOCKET_TEMPLATE"}
	out, _ := asNobody("status")
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("wcache status as uid %d: %q lacks %q", nobody, out, w)
		}
	}
	out, code := asNobody("attach", "--backend", "mock", "--gpu-id", "0", "--device-uuid", h.UUIDs[0], "--model", model.Dir)
	if code == 0 || !strings.Contains(out, "no wcache daemon") ||
		!strings.Contains(out, fmt.Sprintf("pid %d (uid 0: wcache serve", d.PID())) || !strings.Contains(out, "--allow-uid 65534") {
		t.Errorf("wcache attach as uid %d: exit %d, %q; want the no-daemon error naming root's daemon and how to share it", nobody, code, out)
	}
}
