package dist

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/test/testproc"
)

// nobody is the uid and gid of the other user's daemon.
const nobody = 65534

// TestReadinessProbeStates runs daemonset.yaml's readiness probe against the
// states whose `wcache status` output is more than one row per daemon: a
// daemon holding two generations (target and draft), a daemon filled from
// its sibling GPU ("filled from peer" line), and another user's daemon
// visible in /proc (the "daemons of other users" block, as under hostPID).
// The probe passes in each, and fails once a daemon dies (stale) and when
// none is left.
func TestReadinessProbeStates(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start the other user's daemon (SysProcAttr.Credential)")
	}
	n := newNode(t, readDaemonSet(t, "daemonset.yaml"), "")
	if n.probe() {
		t.Fatal("readiness probe passes before any daemon runs")
	}
	models := t.TempDir()
	target, draft := filepath.Join(models, "target"), filepath.Join(models, "draft")
	for i, dir := range []string{target, draft} {
		if _, err := safetensorstest.GenerateCheckpoint(dir, safetensorstest.GenOptions{Seed: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}

	gpu0 := n.serve("--gpu-id", "0", "--model", target, "--draft-model", draft)
	n.waitServing(0, gpu0)
	if out := n.wcache("status"); !strings.Contains(out, "2 generations") {
		t.Fatalf("status does not list two generations:\n%s", out)
	}
	n.mustProbe("a daemon holding two generations")

	gpu1 := n.serve("--gpu-id", "1", "--model", target)
	n.waitServing(1, gpu1)
	if out := n.wcache("status"); !strings.Contains(out, "filled from peer") {
		t.Fatalf("the second daemon was not filled from its sibling:\n%s", out)
	}
	n.mustProbe("a daemon filled from its sibling")

	other := n.serveAsNobody()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(n.wcache("status"), "daemons of other users"); {
		if other.Exited() || time.Now().After(deadline) {
			t.Fatalf("the other user's daemon is not listed:\n%s\n%s:\n%s", n.wcache("status"), other, other.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.mustProbe("another user's daemon listed")

	gpu1.Kill()
	if n.probe() {
		t.Fatalf("probe passes with a dead daemon's files left:\n%s", n.wcache("status"))
	}
	if out := n.wcache("status", "--check"); !strings.Contains(out, "GPU 1") || !strings.Contains(out, "stale") {
		t.Errorf("status --check does not name the dead daemon: %q", out)
	}
	n.wcache("stop", "--all")
	n.wcache("cleanup", "--all")
	if out := n.wcache("status"); !strings.Contains(out, "no wcache daemons") {
		t.Fatalf("daemons left after stop and cleanup:\n%s", out)
	}
	if n.probe() {
		t.Fatal("probe passes with no daemon left")
	}
}

// serve starts `wcache serve --backend mock` with args in the node's
// environment.
func (n *node) serve(args ...string) *testproc.Process {
	n.t.Helper()
	p, err := testproc.Start(testproc.Options{Path: filepath.Join(n.bin, "wcache"),
		Args: append([]string{"serve", "--backend", "mock"}, args...), Env: n.env})
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { p.Stop(30 * time.Second) })
	return p
}

// serveAsNobody starts an empty mock daemon as uid and gid 65534, with a
// runtime folder and mock devices of its own: a daemon of another user.
func (n *node) serveAsNobody() *testproc.Process {
	n.t.Helper()
	if err := os.Chmod(n.bin, 0o755); err != nil { // the binaries, readable by that user
		n.t.Fatal(err)
	}
	home, err := os.MkdirTemp("/tmp", "wn-")
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { os.RemoveAll(home) })
	if err := os.Chown(home, nobody, nobody); err != nil {
		n.t.Fatal(err)
	}
	env := []string{"PATH=" + n.bin + ":/usr/bin:/bin", "HOME=" + home, "XDG_RUNTIME_DIR=" + home,
		"WCACHE_MOCK_DEVICES=1", "WCACHE_MOCK_DIR=" + home}
	p, err := testproc.Start(testproc.Options{Path: filepath.Join(n.bin, "wcache"),
		Args: []string{"serve", "--backend", "mock", "--gpu-id", "0"}, Env: env,
		Edit: func(c *exec.Cmd) { c.SysProcAttr.Credential = &syscall.Credential{Uid: nobody, Gid: nobody} }})
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { p.Stop(30 * time.Second) })
	return p
}

// waitServing waits until `wcache status` lists GPU gpu as serving.
func (n *node) waitServing(gpu int, p *testproc.Process) {
	n.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); n.daemons()[gpu][1] != "serving"; {
		if p.Exited() || time.Now().After(deadline) {
			n.t.Fatalf("GPU %d is not serving:\n%s\n%s:\n%s", gpu, n.wcache("status"), p, p.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// mustProbe fails the test when the readiness probe does not pass.
func (n *node) mustProbe(state string) {
	n.t.Helper()
	if !n.probe() {
		n.t.Fatalf("readiness probe fails with %s; status:\n%s\nstatus --check:\n%s", state, n.wcache("status"), n.wcache("status", "--check"))
	}
}
