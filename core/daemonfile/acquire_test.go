package daemonfile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/core/paths/pathstest"
	"github.com/wcache/wcache/internal/procstat"
)

func TestAcquireRecordsOwnerAndHoldsLock(t *testing.T) {
	p := testPaths(t)
	var logs []string
	opts := fastOpts(false)
	opts.Logf = func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }
	lock, res, err := Acquire(context.Background(), p, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	if res.Action != ActionNone {
		t.Fatalf("result %+v on a clean device", res)
	}
	// A normal start reads as what this process did, not as a conflict.
	want := "device " + p.DeviceUUID + ": took the identity lock " + p.Lock + " (pid " + strconv.Itoa(os.Getpid()) + ")"
	if len(logs) != 1 || logs[0] != want {
		t.Fatalf("logs on a clean device = %q, want [%q]", logs, want)
	}
	if lock.Path() != p.Lock {
		t.Fatalf("Path = %q", lock.Path())
	}
	var o procRef
	raw, err := os.ReadFile(p.Lock)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatalf("lock file content %q: %v", raw, err)
	}
	start, _ := procstat.StartTime(os.Getpid())
	if o.PID != os.Getpid() || o.StartTime != start {
		t.Fatalf("lock records %+v, want pid %d start %d", o, os.Getpid(), start)
	}
	fi, _ := os.Stat(p.Lock)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("lock file mode %s", fi.Mode())
	}
	flags, err := unix.FcntlInt(lock.f.Fd(), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("lock file descriptor not close-on-exec: flags %#x, %v", flags, err)
	}
	assertLockHeld(t, p.Lock)

	// A second Acquire in the same process loses, naming this process.
	_, _, err = Acquire(context.Background(), p, fastOpts(true))
	var live *LiveDaemonError
	if !errors.As(err, &live) || live.PID != os.Getpid() {
		t.Fatalf("second Acquire (even forced) = %v, want *LiveDaemonError naming pid %d", err, os.Getpid())
	}

	if err := lock.Release(); err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	mustExist(t, p.Lock)
	checkAcquirable(t, p, "after Release")
}

func TestAcquireRemovesStale(t *testing.T) {
	p := testPaths(t)
	pid, start := deadProcess(t)
	pathstest.DeadSocket(t, p.Socket)
	if err := WriteReady(p.Ready, Ready{PID: pid, StartTime: start}); err != nil {
		t.Fatal(err)
	}
	lock, res, err := Acquire(context.Background(), p, fastOpts(false))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	if res.Action != ActionRemovedStale || res.PID != pid || len(res.Removed) != 2 {
		t.Fatalf("result %+v, want removed-stale of %d", res, pid)
	}
	mustNotExist(t, p.Socket, p.Ready)
}

func TestAcquireRaceGoroutines(t *testing.T) {
	p := testPaths(t)
	const n = 8
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		locks = make([]*Lock, n)
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			locks[i], _, errs[i] = Acquire(context.Background(), p, fastOpts(false))
		})
	}
	close(start)
	wg.Wait()
	winners := 0
	for i := range n {
		if errs[i] == nil {
			winners++
			defer locks[i].Release()
			continue
		}
		if !errors.Is(errs[i], ErrLiveDaemon) {
			t.Errorf("loser %d: %v, want ErrLiveDaemon", i, errs[i])
		}
	}
	if winners != 1 {
		t.Fatalf("%d goroutines acquired the lock, want exactly 1", winners)
	}
}

func TestAcquireRaceProcesses(t *testing.T) {
	p := testPaths(t)
	const n = 4
	children := make([]*child, n)
	for i := range children {
		children[i] = startHelper(t, "race", p)
	}
	for _, c := range children {
		c.expect(t, "waiting")
	}
	for _, c := range children {
		if _, err := c.stdin.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
	}
	var winner *child
	var lost []int
	for _, c := range children {
		line := c.expect(t, "")
		switch {
		case line == "won":
			if winner != nil {
				t.Fatalf("pids %d and %d both acquired the lock", winner.pid(), c.pid())
			}
			winner = c
		case strings.HasPrefix(line, "lost "):
			pid, err := strconv.Atoi(strings.TrimPrefix(line, "lost "))
			if err != nil {
				t.Fatalf("bad line %q", line)
			}
			lost = append(lost, pid)
		default:
			t.Fatalf("helper pid %d: %q", c.pid(), line)
		}
	}
	if winner == nil {
		t.Fatal("no process acquired the lock")
	}
	for _, pid := range lost {
		// The loser names the winner, or no one if it looked before the
		// winner recorded itself.
		if pid != winner.pid() && pid != 0 {
			t.Errorf("loser reported holder pid %d, winner is %d", pid, winner.pid())
		}
	}
	assertLockHeld(t, p.Lock)
}

func TestAcquireForceKillsStubbornDaemon(t *testing.T) {
	p := testPaths(t)
	d := startHelper(t, "stubborn", p) // ignores SIGTERM: needs SIGKILL
	d.expect(t, "ready")
	lock, res, err := Acquire(context.Background(), p, fastOpts(true))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	if res.Action != ActionTookOver || res.PID != d.pid() {
		t.Fatalf("result %+v, want took-over from %d", res, d.pid())
	}
	if ws := d.waitExit(t); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("old daemon exit status %v, want killed by SIGKILL", ws)
	}
	mustNotExist(t, p.Socket, p.Ready)
	assertLockHeld(t, p.Lock)
	raw, _ := os.ReadFile(p.Lock)
	if !strings.Contains(string(raw), `"pid":`+strconv.Itoa(os.Getpid())) {
		t.Fatalf("lock file %q does not record the new owner", raw)
	}
}

func TestAcquireForceTakesOverFromDaemon(t *testing.T) {
	p := testPaths(t)
	d := startHelper(t, "daemon", p)
	d.expect(t, "ready")
	start := d.startTime(t)
	lock, res, err := Acquire(context.Background(), p, fastOpts(true))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	if res.Action != ActionTookOver || res.PID != d.pid() {
		t.Fatalf("result %+v", res)
	}
	// Acquire returned only once the old daemon was no longer running.
	if got := procstat.Inspect(d.pid(), start); got == procstat.Alive {
		t.Fatal("Acquire returned while the old daemon was alive")
	}
	if ws := d.waitExit(t); ws.Signal() != syscall.SIGTERM {
		t.Fatalf("old daemon exit status %v, want SIGTERM", ws)
	}
	assertLockHeld(t, p.Lock)
}

func TestAcquireLiveReadyFileWithoutLock(t *testing.T) {
	p := testPaths(t)
	// A running process named by the ready file, without the lock (its lock
	// file was deleted and recreated): still a live daemon.
	d := startHelper(t, "sleeper", p)
	d.expect(t, "ready")
	start := d.startTime(t)
	if err := WriteReady(p.Ready, Ready{PID: d.pid(), StartTime: start, DeviceUUID: p.DeviceUUID}); err != nil {
		t.Fatal(err)
	}
	_, _, err := Acquire(context.Background(), p, fastOpts(false))
	var live *LiveDaemonError
	if !errors.As(err, &live) || live.PID != d.pid() {
		t.Fatalf("Acquire = %v, want *LiveDaemonError naming %d", err, d.pid())
	}
	mustExist(t, p.Ready)

	// With Force it is terminated: the sleeper reports SIGTERM and keeps
	// running, so SIGKILL follows after Grace.
	opts := fastOpts(true)
	opts.Grace = time.Second // room for the sleeper to report the SIGTERM
	lock, res, err := Acquire(context.Background(), p, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	if res.Action != ActionTookOver || res.PID != d.pid() {
		t.Fatalf("result %+v", res)
	}
	if ws := d.waitExit(t); ws.Signal() != syscall.SIGKILL {
		t.Fatalf("exit status %v, want SIGKILL", ws)
	}
	if d.seen = append(d.seen, drain(d.lines)...); !containsLine(d.seen, "signal terminated") {
		t.Fatalf("sleeper output %q lacks the SIGTERM it received first", d.seen)
	}
	mustNotExist(t, p.Ready)
}

func drain(lines chan string) []string {
	var out []string
	for l := range lines {
		out = append(out, l)
	}
	return out
}

func containsLine(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}
