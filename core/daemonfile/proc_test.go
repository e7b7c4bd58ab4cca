package daemonfile

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/sdk/poll"
)

func TestProcessStartTimeSelf(t *testing.T) {
	start, err := ProcessStartTime(os.Getpid())
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
		t.Fatalf("ProcessStartTime = %d, /proc/self/stat field 22 = %d", start, want)
	}
	if _, err := ProcessStartTime(0); err == nil {
		t.Fatal("ProcessStartTime(0) succeeded")
	}
}

func TestInspectProcess(t *testing.T) {
	self := os.Getpid()
	start, err := ProcessStartTime(self)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		pid   int
		start uint64
		want  ProcState
	}{
		{"self", self, start, ProcAlive},
		{"self-other-start", self, start + 1, ProcReused},
		{"self-unknown-start", self, 0, ProcReused},
		{"pid0", 0, start, ProcDead},
		{"negative", -1, start, ProcDead},
	}
	for _, tc := range cases {
		if got := InspectProcess(tc.pid, tc.start); got != tc.want {
			t.Errorf("%s: InspectProcess = %s, want %s", tc.name, got, tc.want)
		}
	}

	// A child that exited and was reaped is dead; before reaping it is a zombie.
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "-test.run=^$")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	cstart, err := ProcessStartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, cstart, ProcZombie)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := InspectProcess(pid, cstart); got != ProcDead {
		t.Fatalf("reaped child: %s, want dead", got)
	}
}

// waitState polls until InspectProcess(pid, start) == want.
func waitState(t *testing.T, pid int, start uint64, want ProcState) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, fmt.Sprintf("pid %d in state %s", pid, want), func() bool {
		return InspectProcess(pid, start) == want
	})
}
