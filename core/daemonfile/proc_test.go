package daemonfile

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/sdk/procstat"
)

func TestProcessStartTimeSelf(t *testing.T) {
	start, err := procstat.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	want, _ := strconv.ParseUint(fields[19], 10, 64)
	if start != want || start == 0 {
		t.Fatalf("procstat.StartTime = %d, /proc/self/stat field 22 = %d", start, want)
	}
	if _, err := procstat.StartTime(0); err == nil {
		t.Fatal("procstat.StartTime(0) succeeded")
	}
}

func TestInspectProcess(t *testing.T) {
	self := os.Getpid()
	start, err := procstat.StartTime(self)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		pid   int
		start uint64
		want  procstat.State
	}{
		{"self", self, start, procstat.Alive},
		{"self-other-start", self, start + 1, procstat.Reused},
		{"self-unknown-start", self, 0, procstat.Reused},
		{"pid0", 0, start, procstat.Dead},
		{"negative", -1, start, procstat.Dead},
	}
	for _, tc := range cases {
		if got := procstat.Inspect(tc.pid, tc.start); got != tc.want {
			t.Errorf("%s: procstat.Inspect = %s, want %s", tc.name, got, tc.want)
		}
	}

	// A child that exited and was reaped is dead; before reaping it is a zombie.
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "-test.run=^$")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	cstart, err := procstat.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, cstart, procstat.Zombie)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := procstat.Inspect(pid, cstart); got != procstat.Dead {
		t.Fatalf("reaped child: %s, want dead", got)
	}
}

// waitState polls until procstat.Inspect(pid, start) == want.
func waitState(t *testing.T, pid int, start uint64, want procstat.State) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := procstat.Inspect(pid, start)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: state %s, want %s", pid, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
