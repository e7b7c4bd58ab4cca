package daemonfile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/internal/procstat"
)

// sharedPaths returns daemon paths in a fresh world-writable sticky
// directory, as a shared template directory would be.
func sharedPaths(t *testing.T) paths.Paths {
	t.Helper()
	p := testPaths(t)
	if err := os.Chmod(filepath.Dir(p.Ready), 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return p
}

// nobody returns a command running args as uid/gid 65534 through setpriv,
// skipping the test (with the reason) where that is impossible.
func nobody(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil || os.Geteuid() != 0 {
		t.Skipf("cannot run a process as another uid: setpriv %v, euid %d (needs root)", err, os.Geteuid())
	}
	return exec.Command(setpriv, append([]string{"--reuid", "65534", "--regid", "65534", "--clear-groups", "--"}, args...)...)
}

// innocent starts an unrelated `sleep` (as root, like the caller) and
// returns its identity; the test fails if anything signals it.
func innocent(t *testing.T) procRef {
	t.Helper()
	pid := childproc.Sleeper(t)
	start, err := procstat.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	return procRef{PID: pid, StartTime: start}
}

func ownerJSON(r procRef) string {
	return fmt.Sprintf(`{"pid":%d,"start_time":%d}`, r.PID, r.StartTime)
}

func readyJSON(r procRef, p paths.Paths) string {
	return fmt.Sprintf(`{"pid":%d,"start_time":%d,"device_uuid":%q,"socket":%q}`, r.PID, r.StartTime, p.DeviceUUID, p.Socket)
}

// plant writes content to path as uid 65534.
func plant(t *testing.T, path, content string) {
	t.Helper()
	out, err := nobody(t, "sh", "-c", `printf %s "$1" > "$2"`, "plant", content, path).CombinedOutput()
	if err != nil {
		t.Fatalf("plant %s as uid 65534: %v: %s", path, err, out)
	}
}

func assertAlive(t *testing.T, what string, r procRef) {
	t.Helper()
	time.Sleep(50 * time.Millisecond) // a SIGTERM to sleep takes effect at once
	if s := procstat.Inspect(r.PID, r.StartTime); s != procstat.Alive {
		t.Fatalf("%s (pid %d) is %s: it was signalled", what, r.PID, s)
	}
}

// TestForceIgnoresFilesPlantedByAnotherUser: ready and lock files written
// by uid 65534, naming a live process of root, neither block nor make
// --force signal it, and never count as a daemon.
func TestForceIgnoresFilesPlantedByAnotherUser(t *testing.T) {
	p := sharedPaths(t)
	victim := innocent(t)
	plantBoth := func() {
		os.Remove(p.Ready) // what an earlier round left is root's now
		os.Remove(p.Lock)
		plant(t, p.Ready, readyJSON(victim, p))
		plant(t, p.Lock, ownerJSON(victim))
	}

	plantBoth()
	if _, err := ReadReady(p.Ready); !errors.Is(err, ErrUntrustedFile) {
		t.Fatalf("ReadReady of a planted file = %v, want ErrUntrustedFile", err)
	}
	res, err := Cleanup(context.Background(), p, fastOpts(false))
	if err != nil {
		t.Fatalf("Cleanup without --force: %v (a planted file must not look like a live daemon)", err)
	}
	if res.Action == ActionTookOver {
		t.Fatalf("Cleanup result %+v", res)
	}
	assertAlive(t, "the process named by the planted files", victim)

	plantBoth()
	if _, err := Cleanup(context.Background(), p, fastOpts(true)); err != nil {
		t.Fatalf("Cleanup --force: %v", err)
	}
	assertAlive(t, "the process named by the planted files", victim)

	plantBoth()
	lock, _, err := Acquire(context.Background(), p, fastOpts(true))
	if err != nil {
		t.Fatalf("Acquire --force (serve --force): %v", err)
	}
	defer lock.Release()
	assertAlive(t, "the process named by the planted files", victim)
	// The daemon's lock file is now its own.
	fi, err := os.Stat(p.Lock)
	if err != nil {
		t.Fatal(err)
	}
	if uid, _ := fileOwner(fi); int(uid) != os.Geteuid() {
		t.Fatalf("lock file owned by uid %d after Acquire", uid)
	}
}

// TestForceNeverSignalsForAHeldForeignLock: a lock file of uid 65534, held
// by a process of uid 65534 and naming a root process, is refused with
// ErrUntrustedFile and nobody is signalled, with or without --force.
func TestForceNeverSignalsForAHeldForeignLock(t *testing.T) {
	p := sharedPaths(t)
	victim := innocent(t)
	plant(t, p.Lock, ownerJSON(victim))
	holder := nobody(t, "flock", "--nonblock", p.Lock, "sleep", "300")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	holderStart := waitHeld(t, p.Lock, holder.Process.Pid)

	for _, force := range []bool{false, true} {
		_, err := Cleanup(context.Background(), p, fastOpts(force))
		var ue *UntrustedFileError
		if !errors.As(err, &ue) || ue.UID != 65534 || ue.Holder != holder.Process.Pid {
			t.Fatalf("Cleanup force=%v = %v, want *UntrustedFileError uid 65534 held by %d", force, err, holder.Process.Pid)
		}
		if _, _, err := Acquire(context.Background(), p, fastOpts(force)); !errors.Is(err, ErrUntrustedFile) {
			t.Fatalf("Acquire force=%v = %v, want ErrUntrustedFile", force, err)
		}
	}
	assertAlive(t, "the process named by the foreign lock", victim)
	assertAlive(t, "the foreign lock holder", procRef{PID: holder.Process.Pid, StartTime: holderStart})
}

// TestForceSignalsOnlyTheKernelsLockHolder: a trusted lock file whose
// recorded owner is a live process that does not hold the flock (someone
// else does) gets nobody signalled: the recorded pid is not proven.
func TestForceSignalsOnlyTheKernelsLockHolder(t *testing.T) {
	if _, err := os.Stat("/proc/locks"); err != nil {
		t.Skipf("no /proc/locks: %v", err)
	}
	p := testPaths(t)
	victim := innocent(t)
	if err := os.WriteFile(p.Lock, []byte(ownerJSON(victim)), 0o600); err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("flock", "--nonblock", p.Lock, "sleep", "300")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	holderStart := waitHeld(t, p.Lock, holder.Process.Pid)

	opts := fastOpts(true)
	opts.Wait = 300 * time.Millisecond
	if _, err := Cleanup(context.Background(), p, opts); !errors.Is(err, ErrTakeoverTimeout) {
		t.Fatalf("Cleanup --force = %v, want ErrTakeoverTimeout", err)
	}
	assertAlive(t, "the recorded owner that does not hold the lock", victim)
	assertAlive(t, "the unrecorded lock holder", procRef{PID: holder.Process.Pid, StartTime: holderStart})
}

// waitHeld waits until pid holds the flock on path and returns its start
// time.
func waitHeld(t *testing.T, path string, pid int) uint64 {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		fi, err := os.Stat(path)
		if err != nil {
			continue
		}
		if pids, _ := flockHolders(fi); len(pids) == 1 && pids[0] == pid {
			start, err := procstat.StartTime(pid)
			if err != nil {
				t.Fatal(err)
			}
			return start
		}
	}
	t.Fatalf("pid %d never held the flock on %s", pid, path)
	return 0
}

func TestReadReadyRefusesSymlinkAndFIFO(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := WriteReady(good, Ready{PID: 1, DeviceUUID: "GPU-1"}); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{link, fifo} {
		done := make(chan error, 1)
		go func() { _, err := ReadReady(path); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrMalformedReady) {
				t.Errorf("ReadReady(%s) = %v, want ErrMalformedReady", path, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("ReadReady(%s) blocked", path)
		}
	}
}

func TestParseLocks(t *testing.T) {
	data := []byte("1: FLOCK  ADVISORY  WRITE 28723 fe:00:9978449 0 EOF\n" +
		"1: -> FLOCK  ADVISORY  WRITE 31000 fe:00:9978449 0 EOF\n" +
		"2: POSIX  ADVISORY  WRITE 555 fe:00:9978449 0 EOF\n" +
		"3: FLOCK  ADVISORY  WRITE 777 fe:00:12 0 EOF\n" +
		"4: FLOCK  ADVISORY  READ 888 103:1a:9978449 0 EOF\n")
	if got := parseLocks(data, 0xfe, 0, 9978449); len(got) != 1 || got[0] != 28723 {
		t.Errorf("parseLocks = %v, want [28723] (waiters, POSIX locks and other inodes skipped)", got)
	}
	if got := parseLocks(data, 0x103, 0x1a, 9978449); len(got) != 1 || got[0] != 888 {
		t.Errorf("parseLocks with wide device numbers = %v, want [888]", got)
	}
}
