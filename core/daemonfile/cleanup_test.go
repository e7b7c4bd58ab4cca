package daemonfile

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/core/paths/pathstest"
	"github.com/wcache/wcache/internal/procstat"
)

func TestCleanupNothingThere(t *testing.T) {
	p := testPaths(t)
	res, err := Cleanup(context.Background(), p, fastOpts(false))
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != ActionNone || res.PID != 0 || len(res.Removed) != 0 {
		t.Fatalf("result %+v, want none", res)
	}
	mustNotExist(t, p.Socket, p.Ready, p.Lock)
}

func TestCleanupOnlyLockFileIsNone(t *testing.T) {
	p := testPaths(t)
	if err := os.WriteFile(p.Lock, []byte(`{"pid":1,"start_time":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := Cleanup(context.Background(), p, fastOpts(false))
	if err != nil || res.Action != ActionNone {
		t.Fatalf("Cleanup = %+v, %v; want none", res, err)
	}
	mustExist(t, p.Lock) // lock files are never deleted
}

// deadProcess returns the pid and start time of a process that has exited
// and been reaped.
func deadProcess(t *testing.T) (int, uint64) {
	t.Helper()
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "-test.run=^$")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start, err := procstat.StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, start
}

func TestCleanupRemovesFilesOfDeadProcess(t *testing.T) {
	p := testPaths(t)
	pid, start := deadProcess(t)
	pathstest.DeadSocket(t, p.Socket)
	if err := WriteReady(p.Ready, Ready{PID: pid, StartTime: start, DeviceUUID: p.DeviceUUID, Socket: p.Socket}); err != nil {
		t.Fatal(err)
	}
	// The dead daemon's lock file, recording it, unlocked since it exited.
	if err := os.WriteFile(p.Lock, []byte(`{"pid":`+strconv.Itoa(pid)+`,"start_time":`+strconv.FormatUint(start, 10)+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A temporary file from a write interrupted by the crash.
	tmp := p.Ready[:strings.LastIndexByte(p.Ready, '/')+1] + tempPrefix(p.Ready) + "123"
	if err := os.WriteFile(tmp, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}

	var logs []string
	opts := fastOpts(false)
	opts.Logf = func(f string, a ...any) { logs = append(logs, f) }
	res, err := Cleanup(context.Background(), p, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != ActionRemovedStale || res.PID != pid {
		t.Fatalf("result %+v, want removed-stale of pid %d", res, pid)
	}
	if want := []string{p.Socket, p.Ready, tmp}; !reflect.DeepEqual(res.Removed, want) {
		t.Fatalf("Removed = %v, want %v", res.Removed, want)
	}
	mustNotExist(t, p.Socket, p.Ready, tmp)
	mustExist(t, p.Lock)
	if len(logs) == 0 {
		t.Fatal("Logf was never called")
	}
	// Cleanup released its probe lock.
	h := &lockHandle{path: p.Lock}
	defer h.close()
	if ok, err := h.try(); !ok || err != nil {
		t.Fatalf("lock not free after Cleanup: %v %v", ok, err)
	}
}

func TestCleanupStaleSocketWithoutReady(t *testing.T) {
	p := testPaths(t)
	pathstest.DeadSocket(t, p.Socket)
	res, err := Cleanup(context.Background(), p, fastOpts(false))
	if err != nil || res.Action != ActionRemovedStale || !reflect.DeepEqual(res.Removed, []string{p.Socket}) {
		t.Fatalf("Cleanup = %+v, %v", res, err)
	}
	mustNotExist(t, p.Socket)
}

// TestCleanupRemovesTheDescriptorChannel: a dead daemon's descriptor
// channel beside its socket goes with the socket.
func TestCleanupRemovesTheDescriptorChannel(t *testing.T) {
	p := testPaths(t)
	pathstest.DeadSocket(t, p.Socket)
	pathstest.DeadSocket(t, fdchannel.Path(p.Socket))
	res, err := Cleanup(context.Background(), p, fastOpts(false))
	if err != nil || !reflect.DeepEqual(res.Removed, []string{p.Socket, fdchannel.Path(p.Socket)}) {
		t.Fatalf("Cleanup = %+v, %v", res, err)
	}
	mustNotExist(t, fdchannel.Path(p.Socket))
}

func TestCleanupRefusesToRemoveNonSocket(t *testing.T) {
	p := testPaths(t)
	if err := os.WriteFile(p.Socket, []byte("user data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Cleanup(context.Background(), p, fastOpts(false)); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Cleanup over a regular file at the socket path: %v", err)
	}
	mustExist(t, p.Socket)
}

func TestCleanupZombieIsDead(t *testing.T) {
	p := testPaths(t)
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "-test.run=^$") // exits at once; not reaped until Wait
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	start, err := procstat.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, start, procstat.Zombie)
	pathstest.DeadSocket(t, p.Socket)
	if err := WriteReady(p.Ready, Ready{PID: pid, StartTime: start, DeviceUUID: p.DeviceUUID}); err != nil {
		t.Fatal(err)
	}
	res, err := Cleanup(context.Background(), p, fastOpts(false))
	if err != nil {
		t.Fatalf("Cleanup with a zombie daemon: %v", err)
	}
	if res.Action != ActionRemovedStale || res.PID != pid {
		t.Fatalf("result %+v, want removed-stale of zombie %d", res, pid)
	}
	mustNotExist(t, p.Socket, p.Ready)
	if got := procstat.Inspect(pid, start); got != procstat.Zombie {
		t.Fatalf("zombie state changed to %s", got)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestCleanupReusedPIDIsDeadAndNotSignalled(t *testing.T) {
	for _, force := range []bool{false, true} {
		t.Run("force="+strconv.FormatBool(force), func(t *testing.T) {
			p := testPaths(t)
			innocent := startHelper(t, "sleeper", p)
			innocent.expect(t, "ready")
			start := innocent.startTime(t)
			// A ready file whose pid now belongs to another process.
			pathstest.DeadSocket(t, p.Socket)
			if err := WriteReady(p.Ready, Ready{PID: innocent.pid(), StartTime: start + 1, DeviceUUID: p.DeviceUUID}); err != nil {
				t.Fatal(err)
			}
			res, err := Cleanup(context.Background(), p, fastOpts(force))
			if err != nil {
				t.Fatal(err)
			}
			if res.Action != ActionRemovedStale {
				t.Fatalf("result %+v, want removed-stale", res)
			}
			mustNotExist(t, p.Socket, p.Ready)
			if got := procstat.Inspect(innocent.pid(), start); got != procstat.Alive {
				t.Fatalf("innocent process is %s", got)
			}
			if rest := innocent.finish(t); len(rest) != 0 {
				t.Fatalf("innocent process was signalled: %q", rest)
			}
			if !innocent.cmd.ProcessState.Success() {
				t.Fatalf("innocent process exit: %v", innocent.cmd.ProcessState)
			}
		})
	}
}

func TestCleanupLiveDaemonRefused(t *testing.T) {
	p := testPaths(t)
	d := startHelper(t, "daemon", p)
	d.expect(t, "ready")

	res, err := Cleanup(context.Background(), p, fastOpts(false))
	var live *LiveDaemonError
	if !errors.As(err, &live) || !errors.Is(err, ErrLiveDaemon) {
		t.Fatalf("Cleanup with a live daemon: %+v, %v; want *LiveDaemonError", res, err)
	}
	if live.PID != d.pid() || live.DeviceUUID != p.DeviceUUID || live.Socket != p.Socket || live.Ready != p.Ready {
		t.Fatalf("LiveDaemonError %+v, want pid %d and the device's paths", live, d.pid())
	}
	for _, m := range []string{"pid " + strconv.Itoa(d.pid()), p.Socket, "--force"} {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("message %q lacks %q", err, m)
		}
	}
	mustExist(t, p.Socket, p.Ready, p.Lock)
	assertLockHeld(t, p.Lock)
	if rest := d.finish(t); len(rest) != 0 || !d.cmd.ProcessState.Success() {
		t.Fatalf("daemon disturbed: %q %v", rest, d.cmd.ProcessState)
	}
}

func TestCleanupLockHeldBeforeReadyFile(t *testing.T) {
	p := testPaths(t)
	d := startHelper(t, "locked", p) // holds the lock, no ready file yet
	d.expect(t, "ready")
	mustNotExist(t, p.Ready)
	_, err := Cleanup(context.Background(), p, fastOpts(false))
	var live *LiveDaemonError
	if !errors.As(err, &live) || live.PID != d.pid() {
		t.Fatalf("Cleanup = %v, want *LiveDaemonError with pid %d from the lock file", err, d.pid())
	}
}

func TestCleanupForceTakesOver(t *testing.T) {
	p := testPaths(t)
	d := startHelper(t, "daemon", p)
	d.expect(t, "ready")
	res, err := Cleanup(context.Background(), p, fastOpts(true))
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != ActionTookOver || res.PID != d.pid() {
		t.Fatalf("result %+v, want took-over from %d", res, d.pid())
	}
	if ws := d.waitExit(t); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("old daemon exit status %v, want killed by SIGTERM", ws)
	}
	mustNotExist(t, p.Socket, p.Ready)
	// Cleanup does not keep the lock: a new daemon can start.
	checkAcquirable(t, p, "after forced cleanup")
}

func TestForceNeverSignalsUnverifiableHolder(t *testing.T) {
	p := testPaths(t)
	d := startHelper(t, "locked", p)
	d.expect(t, "ready")
	innocent := startHelper(t, "sleeper", p)
	innocent.expect(t, "ready")
	innocentStart := innocent.startTime(t)
	// The lock is held, but the recorded holder is a pid whose start time
	// does not match (the pid was reused): wcache cannot tell who holds the
	// lock and must signal no one, least of all the pid's new owner.
	bogus := `{"pid":` + strconv.Itoa(innocent.pid()) + `,"start_time":` + strconv.FormatUint(innocentStart+1, 10) + `}`
	if err := os.WriteFile(p.Lock, []byte(bogus), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := fastOpts(true)
	opts.Wait = 200 * time.Millisecond
	_, err := Cleanup(context.Background(), p, opts)
	if !errors.Is(err, ErrTakeoverTimeout) {
		t.Fatalf("Cleanup = %v, want ErrTakeoverTimeout", err)
	}
	for _, c := range []*child{innocent, d} {
		if rest := c.finish(t); len(rest) != 0 || !c.cmd.ProcessState.Success() {
			t.Fatalf("pid %d was disturbed: %q %v", c.pid(), rest, c.cmd.ProcessState)
		}
	}
}

func TestCleanupForceHonoursContext(t *testing.T) {
	p := testPaths(t)
	d := startHelper(t, "stubborn", p)
	d.expect(t, "ready")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	opts := fastOpts(true)
	opts.Grace = time.Minute
	_, err := Cleanup(ctx, p, opts)
	if !errors.Is(err, context.DeadlineExceeded) {
		// Past a minute's Grace it would have sent SIGKILL and reported
		// that instead: the context's error says it was honoured.
		t.Fatalf("Cleanup = %v, want context.DeadlineExceeded", err)
	}
	assertLockHeld(t, p.Lock) // SIGTERM was ignored; the daemon still runs
}

func TestRemoveFiles(t *testing.T) {
	p := testPaths(t)
	pathstest.DeadSocket(t, p.Socket)
	if err := WriteReady(p.Ready, Ready{PID: 1}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.Lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveFiles(p); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, p.Socket, p.Ready)
	mustExist(t, p.Lock)
	if err := RemoveFiles(p); err != nil {
		t.Fatalf("RemoveFiles with nothing there: %v", err)
	}
}
