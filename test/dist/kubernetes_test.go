package dist

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/test/testproc"
)

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// testBin builds wcache and the mock plugin into one temporary folder (as
// the image has them, side by side) once for the package.
func testBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "wcache-dist-bin-")
		if binErr != nil {
			return
		}
		for _, b := range [][2]string{{"wcache", "./cmd/wcache"}, {"wcache-backend-mock", "./plugins/mock"}} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, b[0]), b[1])
			cmd.Dir = filepath.Join("..", "..")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = &buildError{b[1], err, string(out)}
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

type buildError struct {
	pkg string
	err error
	out string
}

func (e *buildError) Error() string { return "go build " + e.pkg + ": " + e.err.Error() + "\n" + e.out }

// node is one simulated GPU node: the DaemonSet container's environment with
// /run/wcache, the PATH and the GPUs replaced by a temporary folder, the
// test binaries and two mock GPUs.
type node struct {
	t    *testing.T
	bin  string
	run  string
	env  []string
	cmd  []string
	prob []string
}

// newNode prepares c's command line and probe for the mock backend. The
// only changes to the shipped command: --backend=cuda → mock, --tp-size=8
// → 2 (two mock GPUs), --model=/models/… → model (file loads).
func newNode(t *testing.T, c container, model string) *node {
	t.Helper()
	bin := testBin(t)
	root, err := os.MkdirTemp("/tmp", "wk-") // socket paths stay short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	run := filepath.Join(root, "run")
	for _, d := range []string{run, filepath.Join(root, "shm"), filepath.Join(root, "home")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	n := &node{t: t, bin: bin, run: run, prob: c.Probe}
	n.env = []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + filepath.Join(root, "home"),
		"WCACHE_MOCK_DEVICES=2", "WCACHE_MOCK_DIR=" + filepath.Join(root, "shm")}
	for k, v := range c.Env {
		n.env = append(n.env, k+"="+strings.ReplaceAll(v, "/run/wcache/", run+"/"))
	}
	slices.Sort(n.env)
	for _, a := range c.Command {
		switch {
		case a == "--backend=cuda":
			a = "--backend=mock"
		case a == "--tp-size=8":
			a = "--tp-size=2"
		case strings.HasPrefix(a, "--model=/models/"):
			a = "--model=" + model
		}
		n.cmd = append(n.cmd, a)
	}
	if slices.Equal(n.cmd, c.Command) {
		t.Fatalf("no substitution applied to %q", c.Command)
	}
	return n
}

// start runs the container's command as a pod would.
func (n *node) start() *testproc.Process {
	n.t.Helper()
	p, err := testproc.Start(testproc.Options{Path: filepath.Join(n.bin, n.cmd[0]), Args: n.cmd[1:], Env: n.env})
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { p.Stop(30 * time.Second) })
	return p
}

// probe runs the readiness probe's command once, its program found on the
// node's PATH (as the kubelet runs it in the container), and reports
// whether it passed.
func (n *node) probe() bool {
	cmd := exec.Command(n.lookPath(n.prob[0]), n.prob[1:]...)
	cmd.Env = n.env
	return cmd.Run() == nil
}

// lookPath is the first executable file named name in the node's PATH, or
// name itself when it has a slash or none is found.
func (n *node) lookPath(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	for _, kv := range n.env {
		path, ok := strings.CutPrefix(kv, "PATH=")
		if !ok {
			continue
		}
		for _, dir := range filepath.SplitList(path) {
			if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return filepath.Join(dir, name)
			}
		}
	}
	return name
}

// waitProbe waits until the probe passes or p exits.
func (n *node) waitProbe(p *testproc.Process) {
	n.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !n.probe() {
		if p.Exited() {
			n.t.Fatalf("%s exited before the readiness probe passed:\n%s", p, p.Output())
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("readiness probe never passed; status:\n%s\n%s output:\n%s", n.wcache("status"), p, p.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// wcache runs the CLI in the node's environment and returns its output.
func (n *node) wcache(args ...string) string {
	cmd := exec.Command(filepath.Join(n.bin, "wcache"), args...)
	cmd.Env = n.env
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// daemons are `wcache status --json`'s rows: pid and state per GPU.
func (n *node) daemons() map[int][2]string {
	n.t.Helper()
	cmd := exec.Command(filepath.Join(n.bin, "wcache"), "status", "--json")
	cmd.Env = n.env
	out, err := cmd.Output()
	if err != nil {
		n.t.Fatalf("wcache status --json: %v", err)
	}
	var rows []struct {
		GPU   int    `json:"gpu"`
		PID   int    `json:"pid"`
		State string `json:"state"`
		Bytes uint64 `json:"bytes"`
	}
	if err := json.Unmarshal(out, &rows); err != nil {
		n.t.Fatalf("status --json: %v\n%s", err, out)
	}
	m := map[int][2]string{}
	for _, r := range rows {
		m[r.GPU] = [2]string{strconv.Itoa(r.PID), r.State}
	}
	return m
}

// verify attaches to both ranks' daemons with --verify (every byte compared
// with the checkpoint) using the config the DaemonSet serves.
func (n *node) verify(model string) {
	n.t.Helper()
	for rank := range 2 {
		cmd := exec.Command(filepath.Join(n.bin, "wcache"), "attach", "--verify", "--backend=mock",
			"--gpu-id", strconv.Itoa(rank), "--model", model, "--shard-pattern=model-rank-{tp_rank}-part-*.safetensors",
			"--tp-size=2", "--tp-rank", strconv.Itoa(rank), "--dtype=bf16", "--engine-name=sglang")
		cmd.Env = n.env
		if out, err := cmd.CombinedOutput(); err != nil {
			n.t.Fatalf("attach --verify rank %d: %v\n%s", rank, err, out)
		}
	}
}

// rollout runs the DaemonSet's rolling update on one node with maxSurge 1:
// the new pod starts beside the old one and takes the daemons over; the old
// pod is deleted (SIGTERM) once the new one is ready.
func rollout(t *testing.T, n *node, check func()) {
	old := n.start()
	n.waitProbe(old)
	check()
	before := n.daemons()

	next := n.start()
	// The old launcher lets go of every daemon and idles until deleted.
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(old.Output(), "every daemon handed over to a successor; waiting for SIGTERM") {
		if old.Exited() || next.Exited() || time.Now().After(deadline) {
			t.Fatalf("no handover.\nold pod:\n%s\nnew pod:\n%s", old.Output(), next.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
	n.waitProbe(next)
	after := n.daemons()
	for gpu, b := range before {
		if a := after[gpu]; a[0] == b[0] || a[1] != b[1] {
			t.Errorf("GPU %d: before the rollout pid %s %s, after pid %s %s: want a new daemon in the same state", gpu, b[0], b[1], a[0], a[1])
		}
	}
	check()

	// Kubernetes deletes the old pod: it exits 0 and leaves the new daemons.
	if err := old.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, ok := old.Wait(time.Minute); !ok || code != 0 {
		t.Fatalf("old pod after SIGTERM: exit %d (exited %v)\n%s", code, ok, old.Output())
	}
	if !strings.Contains(old.Output(), "all 2 daemons run on under their successors; exiting") {
		t.Errorf("old pod did not say its daemons run on:\n%s", old.Output())
	}
	if !n.probe() {
		t.Fatalf("probe fails after the old pod is gone:\n%s", n.wcache("status"))
	}
	check()

	// Deleting the last pod stops its daemons: the probe fails again.
	if err := next.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, ok := next.Wait(time.Minute); !ok || code != 0 {
		t.Fatalf("new pod after SIGTERM: exit %d (exited %v)\n%s", code, ok, next.Output())
	}
	if n.probe() {
		t.Errorf("probe passes with no daemon left:\n%s", n.wcache("status"))
	}
}

// TestDaemonSetPublishModeRollout runs deploy/kubernetes/daemonset.yaml's
// command line and readiness probe with the real binaries on two mock GPUs:
// the probe fails before the daemons run, passes for empty daemons waiting
// for a publish, and a rollout (a second pod with the same command) takes
// the daemons over; the old pod then exits 0 on SIGTERM.
func TestDaemonSetPublishModeRollout(t *testing.T) {
	n := newNode(t, readDaemonSet(t, "daemonset.yaml"), "")
	if n.probe() {
		t.Fatal("readiness probe passes before any daemon runs")
	}
	rollout(t, n, func() {
		for gpu, d := range n.daemons() {
			if d[1] != "empty" {
				t.Errorf("GPU %d: state %s, want empty", gpu, d[1])
			}
		}
	})
}

// TestDaemonSetFileLoadRollout: the same for daemonset-model.yaml, on a
// pre-sharded checkpoint that `wcache demo --keep` writes: every byte is
// verified before the rollout, after the takeover and after the old pod is
// gone.
func TestDaemonSetFileLoadRollout(t *testing.T) {
	bin := testBin(t)
	dir, err := os.MkdirTemp("/tmp", "wm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cmd := exec.Command(filepath.Join(bin, "wcache"), "demo", "--dir", dir, "--keep", "--layers", "2", "--tp-size", "2")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("demo --keep: %v\n%s", err, out)
	}
	models, _ := filepath.Glob(filepath.Join(dir, "wcache-demo-*", "model"))
	if len(models) != 1 {
		t.Fatalf("demo --keep left %q", models)
	}
	n := newNode(t, readDaemonSet(t, "daemonset-model.yaml"), models[0])
	if n.probe() {
		t.Fatal("readiness probe passes before any daemon runs")
	}
	rollout(t, n, func() { n.verify(models[0]) })
}
