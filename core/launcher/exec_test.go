package launcher

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/paths/pathstest"
	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/internal/procstat"
)

// helperEnv makes the test binary act as a tiny launcher (see TestMain).
const helperEnv = "WCACHE_LAUNCHER_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "spawn-and-block" {
		os.Exit(helperSpawnAndBlock())
	}
	os.Exit(m.Run())
}

// helperSpawnAndBlock starts `sleep 60` through an ExecStarter from a
// goroutine that then exits, prints the child's pid and blocks until killed.
func helperSpawnAndBlock() int {
	s := NewExecStarter()
	type res struct {
		p   Process
		err error
	}
	rc := make(chan res)
	go func() {
		p, err := s.Start(ChildSpec{Path: "/bin/sleep", Args: []string{"60"}})
		rc <- res{p, err}
	}()
	r := <-rc
	if r.err != nil {
		fmt.Println("error:", r.err)
		return 1
	}
	fmt.Println(r.p.PID())
	select {}
}

func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	poll.Eventually(t, within, fmt.Sprintf("pid %d to exit", pid), func() bool { return !procstat.Running(pid) })
}

func TestExecStarterStatusAndOutput(t *testing.T) {
	s := NewExecStarter()
	defer s.Close()
	var out bytes.Buffer
	o := newChildOutput("[x] ", newLockedWriter(&out), 5)
	p, err := s.Start(ChildSpec{Path: "/bin/sh", Args: []string{"-c", "echo to-stdout; echo to-stderr >&2; exit 3"},
		Env: []string{"PATH=/usr/bin:/bin"}, Output: o})
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait()
	if err != nil || st != (ExitStatus{Code: 3}) || st.String() != "exit status 3" || st.Success() {
		t.Fatalf("Wait = %v, %v", st, err)
	}
	o.Flush()
	if got := o.Tail(); len(got) != 2 || !strings.Contains(out.String(), "[x] to-stdout\n") || !strings.Contains(out.String(), "[x] to-stderr\n") {
		t.Fatalf("tail %q output %q", got, out.String())
	}

	p, err = s.Start(ChildSpec{Path: "/bin/sleep", Args: []string{"60"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(); err != nil || st.Signal != syscall.SIGTERM || st.String() != "killed by signal terminated" {
		t.Fatalf("Wait after SIGTERM = %v, %v", st, err)
	}

	if _, err := s.Start(ChildSpec{Path: "/nonexistent/wcache"}); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Start of a missing binary = %v, want ErrNotExist", err)
	}
}

// The child of an ExecStarter runs in its own process group, so that a
// terminal's Ctrl-C reaches only the launcher.
func TestExecStarterOwnProcessGroup(t *testing.T) {
	s := NewExecStarter()
	defer s.Close()
	p, err := s.Start(ChildSpec{Path: "/bin/sleep", Args: []string{"60"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Signal(syscall.SIGKILL); _, _ = p.Wait() }()
	pgid, err := syscall.Getpgid(p.PID())
	if err != nil || pgid != p.PID() {
		t.Fatalf("child pgid %d (%v), want its own pid %d", pgid, err, p.PID())
	}
}

// Closing the starter retires its locked thread, which delivers Pdeathsig
// (SIGTERM) to a child still running: the mechanism that protects against
// a SIGKILLed launcher.
func TestExecStarterCloseDeliversPdeathsig(t *testing.T) {
	s := NewExecStarter()
	p, err := s.Start(ChildSpec{Path: "/bin/sleep", Args: []string{"60"}})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	done := make(chan ExitStatus, 1)
	go func() { st, _ := p.Wait(); done <- st }()
	select {
	case st := <-done:
		if st.Signal != syscall.SIGTERM {
			t.Fatalf("child ended with %v, want SIGTERM", st)
		}
	case <-time.After(5 * time.Second):
		_ = p.Signal(syscall.SIGKILL)
		t.Fatal("child still running 5s after the starter closed")
	}
	if _, err := s.Start(ChildSpec{Path: "/bin/true"}); !errors.Is(err, ErrStarterClosed) {
		t.Fatalf("Start after Close = %v, want ErrStarterClosed", err)
	}
}

// A launcher killed with SIGKILL leaves no daemon behind, even though the
// goroutine that asked for the spawn had long exited.
func TestExecStarterChildDiesWithSIGKILLedParent(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(self, "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=spawn-and-block")
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = helper.Process.Kill(); _ = helper.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("read helper output: %v (%q)", err, line)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	defer syscall.Kill(child, syscall.SIGKILL)
	time.Sleep(100 * time.Millisecond)
	if !procstat.Running(child) {
		t.Fatalf("child %d died while the helper was alive", child)
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	waitGone(t, child, 5*time.Second)
}

// fakeDaemonScript is a stand-in for `wcache serve` with the same contract
// towards the launcher: it says "serving" and then writes its ready file
// (pid = its own), so that the line is in the launcher's output by the time
// the launcher sees the daemon ready; it removes the file and exits 0 on
// SIGTERM. FAKE_FAIL_GPU makes the daemon of that GPU fail at "load";
// FAKE_NEVER_READY_GPU makes one hang. Its pid file appears whole (written
// aside, then renamed): the launcher may stop it at any point.
const fakeDaemonScript = `#!/bin/sh
gpu="$3"
ready="$FAKE_DIR/GPU-test-$gpu.ready.json"
echo $$ > "$FAKE_DIR/.pid-$gpu" && mv "$FAKE_DIR/.pid-$gpu" "$FAKE_DIR/pid-$gpu"
echo "daemon for gpu $gpu: loading"
if [ "$FAKE_FAIL_GPU" = "$gpu" ]; then echo "gpu $gpu: load failed: injected" >&2; exit 7; fi
trap 'kill $sleeper 2>/dev/null; rm -f "$ready"; echo "gpu $gpu: stopped"; exit 0' TERM
sleep 60 & sleeper=$!
if [ "$FAKE_NEVER_READY_GPU" != "$gpu" ]; then
  echo "gpu $gpu: serving"
  printf '{"pid": %d, "device_uuid": "GPU-test-%s"}\n' $$ "$gpu" > "$FAKE_DIR/.tmp-$gpu"
  mv "$FAKE_DIR/.tmp-$gpu" "$ready"
fi
wait $sleeper
`

// fakePID is the pid fakeDaemonScript recorded for gpu, or -1 (not
// running, for procstat.Running) when it was stopped before it could
// record it.
func fakePID(t *testing.T, dir string, gpu int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("pid-%d", gpu)))
	if errors.Is(err, os.ErrNotExist) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

type resolverFunc func(int) (string, error)

func (f resolverFunc) DeviceUUID(_ context.Context, ordinal int) (string, error) { return f(ordinal) }

// realOptions launches fakeDaemonScript for tp ranks through the real
// ExecStarter, paths layout, cleanup and ready-file reader.
func realOptions(t *testing.T, tp int, env ...string) (Options, string, *childproc.Buffer) {
	t.Helper()
	dir := pathstest.ShortDir(t)
	script := filepath.Join(dir, "fake-wcache")
	if err := os.WriteFile(script, []byte(fakeDaemonScript), 0o755); err != nil {
		t.Fatal(err)
	}
	layout, err := paths.NewLayout(paths.Options{
		SocketTemplate: dir + "/{device_uuid}.sock",
		ReadyTemplate:  dir + "/{device_uuid}.ready.json",
		Getenv:         func(string) string { return "" },
	})
	if err != nil {
		t.Fatal(err)
	}
	out := &childproc.Buffer{}
	return Options{
		Topology:     Topology{TPSize: tp, PPSize: 1, NNodes: 1, GPUIDStep: 1},
		Devices:      resolverFunc(func(i int) (string, error) { return fmt.Sprintf("GPU-test-%d", i), nil }),
		Layout:       layout,
		Executable:   script,
		Env:          append([]string{"PATH=/usr/bin:/bin", "FAKE_DIR=" + dir}, env...),
		ReadyTimeout: 10 * time.Second,
		StopGrace:    5 * time.Second,
		PollInterval: 10 * time.Millisecond,
		Output:       out,
		Logf:         t.Logf,
	}, dir, out
}

func TestLaunchRealProcessesServeAndStop(t *testing.T) {
	opts, dir, out := realOptions(t, 2)
	// A stale ready file of a dead daemon is removed before the spawn.
	stale := filepath.Join(dir, "GPU-test-1.ready.json")
	if err := os.WriteFile(stale, []byte(`{"pid": 999999999, "start_time": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := Launch(context.Background(), opts)
	if err != nil {
		t.Fatalf("Launch: %v\n%s", err, out)
	}
	ds := g.Daemons()
	for i, d := range ds {
		if d.Ready.PID != d.PID || d.Ready.DeviceUUID != fmt.Sprintf("GPU-test-%d", i) || !procstat.Running(d.PID) {
			t.Errorf("daemon %d: %+v", i, d)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Supervise(ctx); err != nil {
		t.Fatalf("Supervise: %v\n%s", err, out)
	}
	for i, d := range ds {
		if procstat.Running(d.PID) {
			t.Errorf("daemon %d (pid %d) still running", i, d.PID)
		}
		if _, err := os.Stat(d.Paths.Ready); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("ready file %s left behind: %v", d.Paths.Ready, err)
		}
	}
	for _, want := range []string{"[gpu 0 tp 0 pp 0] gpu 0: serving", "[gpu 1 tp 1 pp 0] gpu 1: stopped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestLaunchRealProcessFailureStopsSibling(t *testing.T) {
	opts, dir, out := realOptions(t, 2, "FAKE_FAIL_GPU=1", "FAKE_NEVER_READY_GPU=0")
	_, err := Launch(context.Background(), opts)
	var de *DaemonError
	if !errors.As(err, &de) || !errors.Is(err, ErrExitedEarly) {
		t.Fatalf("Launch = %v, want ErrExitedEarly\n%s", err, out)
	}
	if de.Rank.GPUID != 1 || de.Status != "exit status 7" || !strings.Contains(strings.Join(de.Tail, "\n"), "gpu 1: load failed: injected") {
		t.Fatalf("DaemonError = %+v", de)
	}
	// The sibling was stopped before Launch returned.
	if pid := fakePID(t, dir, 0); procstat.Running(pid) {
		t.Fatalf("sibling pid %d still running:\n%s", pid, out)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".ready.json") {
			t.Errorf("ready file %s left behind", e.Name())
		}
	}
}

func TestLaunchRealProcessTimeout(t *testing.T) {
	opts, dir, out := realOptions(t, 2, "FAKE_NEVER_READY_GPU=1")
	opts.ReadyTimeout = 300 * time.Millisecond
	_, err := Launch(context.Background(), opts)
	var te *ReadyTimeoutError
	if !errors.As(err, &te) || len(te.Pending) != 1 || te.Pending[0].Rank.GPUID != 1 {
		t.Fatalf("Launch = %v, want a timeout naming GPU 1\n%s", err, out)
	}
	for gpu := 0; gpu < 2; gpu++ {
		if pid := fakePID(t, dir, gpu); procstat.Running(pid) {
			t.Errorf("daemon of GPU %d (pid %d) still running:\n%s", gpu, pid, out)
		}
	}
}
