package procstat_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/internal/procstat"
)

// startSleeper runs a copy of sleep whose command name holds spaces and
// parentheses (what a naive parser of /proc/<pid>/stat gets wrong).
func startSleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	src, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	bin := filepath.Join(t.TempDir(), "a) S (b")
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
	cmd := exec.Command(bin, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// rawStartTime reads field 22 by hand, counting from the last ')'.
func rawStartTime(t *testing.T, pid int) uint64 {
	t.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	n, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestStartTimeAndInspectOfAnOddlyNamedProcess(t *testing.T) {
	cmd := startSleeper(t)
	pid := cmd.Process.Pid
	start, err := procstat.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if want := rawStartTime(t, pid); start != want {
		t.Fatalf("StartTime = %d, want %d", start, want)
	}
	if got := procstat.Inspect(pid, start); got != procstat.Alive {
		t.Errorf("Inspect = %v, want alive", got)
	}
	if got := procstat.Inspect(pid, start+1); got != procstat.Reused {
		t.Errorf("Inspect with another start time = %v, want pid reused", got)
	}
	if got := procstat.Inspect(pid, 0); got != procstat.Reused {
		t.Errorf("Inspect with start time 0 = %v, want pid reused", got)
	}
	if !procstat.Running(pid) {
		t.Error("Running = false for a running process")
	}

	// Killed and not yet reaped: a zombie, not running.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 5*time.Second, "Inspect after SIGKILL to say zombie", func() bool {
		return procstat.Inspect(pid, start) == procstat.Zombie
	})
	if procstat.Running(pid) {
		t.Error("Running = true for a zombie")
	}
	_ = cmd.Wait()
	if got := procstat.Inspect(pid, start); got != procstat.Dead {
		t.Errorf("Inspect after reaping = %v, want dead", got)
	}
	if procstat.Running(pid) {
		t.Error("Running = true for a reaped process")
	}
	if _, err := procstat.StartTime(pid); err == nil {
		t.Error("StartTime of a reaped process succeeded")
	}
}

func TestInvalidPids(t *testing.T) {
	for _, pid := range []int{0, -1} {
		if procstat.Running(pid) || procstat.Inspect(pid, 1) != procstat.Dead {
			t.Errorf("pid %d: Running or not Dead", pid)
		}
		if _, err := procstat.StartTime(pid); err == nil {
			t.Errorf("StartTime(%d) succeeded", pid)
		}
	}
	if s := procstat.State(9).String(); s != "State(9)" {
		t.Errorf("String of an unknown state = %q", s)
	}
}
