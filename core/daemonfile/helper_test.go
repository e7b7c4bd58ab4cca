package daemonfile

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/paths/pathstest"
	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/internal/procstat"
)

// The test binary doubles as a helper process: with helperEnv set, TestMain
// runs runHelper instead of the tests, so that locks, signals, zombies and
// races are exercised with real processes.
const (
	helperEnv      = "WCACHE_DAEMONFILE_HELPER"
	helperPathsEnv = "WCACHE_DAEMONFILE_HELPER_PATHS" // uuid|socket|ready|lock
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	os.Exit(m.Run())
}

// runHelper modes:
//
//	daemon    Acquire, listen, write the ready file, print "ready", serve
//	          until stdin closes (SIGTERM kills it: Go's default action)
//	stubborn  like daemon, but ignores SIGTERM
//	locked    Acquire only (no socket, no ready file), print "ready"
//	race      print "waiting", read one line, Acquire, print "won" or
//	          "lost <pid>", hold the lock until stdin closes
//	sleeper   hold nothing, report every SIGTERM/SIGINT/SIGHUP as
//	          "signal <name>", print "ready", exit 0 when stdin closes
func runHelper(mode string) int {
	f := strings.Split(os.Getenv(helperPathsEnv), "|")
	if len(f) != 4 {
		fmt.Println("error: bad", helperPathsEnv)
		return 2
	}
	p := paths.Paths{DeviceUUID: f[0], Socket: f[1], Ready: f[2], Lock: f[3]}
	stdin := bufio.NewReader(os.Stdin)
	waitStdin := func() { _, _ = io.Copy(io.Discard, stdin) }
	ctx := context.Background()

	switch mode {
	case "daemon", "stubborn":
		if mode == "stubborn" {
			signal.Ignore(syscall.SIGTERM)
		}
		lock, _, err := Acquire(ctx, p, CleanupOptions{})
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		ln, err := net.Listen("unix", p.Socket)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		start, err := procstat.StartTime(os.Getpid())
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		r := Ready{PID: os.Getpid(), StartTime: start, DeviceUUID: p.DeviceUUID, Socket: p.Socket, Backend: "mock"}
		if err := WriteReady(p.Ready, r); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("ready")
		waitStdin()
		ln.Close()
		_ = RemoveFiles(p)
		_ = lock.Release()
		return 0
	case "locked":
		lock, _, err := Acquire(ctx, p, CleanupOptions{})
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("ready")
		waitStdin()
		_ = lock.Release()
		return 0
	case "race":
		fmt.Println("waiting")
		if _, err := stdin.ReadString('\n'); err != nil {
			return 1
		}
		lock, _, err := Acquire(ctx, p, CleanupOptions{})
		var live *LiveDaemonError
		switch {
		case err == nil:
			fmt.Println("won")
			waitStdin()
			_ = lock.Release()
			return 0
		case errors.As(err, &live):
			fmt.Println("lost", live.PID)
			return 0
		default:
			fmt.Println("error:", err)
			return 1
		}
	case "sleeper":
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		go func() {
			for s := range sigs {
				fmt.Println("signal", s)
			}
		}()
		fmt.Println("ready")
		waitStdin()
		time.Sleep(20 * time.Millisecond) // let a pending signal be reported
		return 0
	}
	fmt.Println("error: unknown mode", mode)
	return 2
}

// checkAcquirable fails t unless a new daemon can take p's lock now
// (Acquire without Force succeeds); it releases the lock again.
func checkAcquirable(t *testing.T, p paths.Paths, when string) {
	t.Helper()
	lock, _, err := Acquire(context.Background(), p, fastOpts(false))
	if err != nil {
		t.Fatalf("Acquire %s: %v", when, err)
	}
	lock.Release()
}

// child is a running helper process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // stdout, line by line; closed at EOF
	done  chan struct{}
	err   error // cmd.Wait's result, valid after done is closed
	seen  []string
}

func startHelper(t *testing.T, mode string, p paths.Paths) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode,
		helperPathsEnv+"="+strings.Join([]string{p.DeviceUUID, p.Socket, p.Ready, p.Lock}, "|"))
	cmd.Stderr = os.Stderr
	stdin, stdout := childproc.StartPiped(t, cmd)
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

// expect reads the next stdout line and fails unless it starts with prefix.
func (c *child) expect(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			t.Fatalf("helper pid %d exited before printing %q (saw %q)", c.cmd.Process.Pid, prefix, c.seen)
		}
		c.seen = append(c.seen, line)
		if !strings.HasPrefix(line, prefix) {
			t.Fatalf("helper pid %d printed %q, want prefix %q", c.cmd.Process.Pid, line, prefix)
		}
		return line
	case <-time.After(10 * time.Second):
		t.Fatalf("helper pid %d: no %q within 10s", c.cmd.Process.Pid, prefix)
	}
	return ""
}

// startTime is the child's start time (procstat.StartTime), what a ready
// or lock file records of it.
func (c *child) startTime(t *testing.T) uint64 {
	t.Helper()
	start, err := procstat.StartTime(c.pid())
	if err != nil {
		t.Fatal(err)
	}
	return start
}

// finish closes stdin, waits for exit and returns the remaining output.
func (c *child) finish(t *testing.T) []string {
	t.Helper()
	c.stdin.Close()
	var rest []string
	for line := range c.lines {
		rest = append(rest, line)
	}
	<-c.done
	return rest
}

// waitExit waits for the helper to exit on its own (for example, killed by a
// signal) and returns its wait status.
func (c *child) waitExit(t *testing.T) syscall.WaitStatus {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("helper pid %d still running", c.cmd.Process.Pid)
	}
	return c.cmd.ProcessState.Sys().(syscall.WaitStatus)
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// testPaths returns the daemon paths for a fresh private directory with a
// short path (socket paths must fit sun_path).
func testPaths(t *testing.T) paths.Paths {
	t.Helper()
	dir := pathstest.ShortDir(t)
	const uuid = "GPU-ffc79498-8ff3-c2dc-3b0d-fafd804516ae"
	l := paths.Layout{
		Socket: paths.MustParseTemplate("test", filepath.Join(dir, "{device_uuid}.sock")),
		Ready:  paths.MustParseTemplate("test", filepath.Join(dir, "{device_uuid}.ready.json")),
	}
	p, err := l.For(uuid)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustExist(t *testing.T, files ...string) {
	t.Helper()
	for _, f := range files {
		if _, err := os.Lstat(f); err != nil {
			t.Errorf("%s should exist: %v", f, err)
		}
	}
}

func mustNotExist(t *testing.T, files ...string) {
	t.Helper()
	for _, f := range files {
		if _, err := os.Lstat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s should be gone: %v", f, err)
		}
	}
}

// assertLockHeld fails unless some open file description holds the flock on
// path (probing from a new one, which must be refused).
func assertLockHeld(t *testing.T, path string) {
	t.Helper()
	h := &lockHandle{path: path}
	defer h.close()
	locked, err := h.try()
	if err != nil {
		t.Fatal(err)
	}
	if locked {
		t.Fatalf("lock %s is free, want it held", path)
	}
}

func fastOpts(force bool) CleanupOptions {
	return CleanupOptions{Force: force, Grace: 300 * time.Millisecond, Wait: 5 * time.Second}
}
