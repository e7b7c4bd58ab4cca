package proctest

import (
	"os/exec"

	"github.com/wcache/wcache/sdk/procstat"
)

// ExitedPID runs a process that ends at once and returns its pid: a pid
// that names no live process (until the kernel reuses it), for tests of
// what is left behind by processes that died.
func ExitedPID(t T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// Sleeper starts an unrelated long-running process (`sleep 300`), killed
// at the test's cleanup, and returns its pid and start time
// (procstat.StartTime): a live process that is no wcache daemon.
func Sleeper(t T) (pid int, start uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	start, err := procstat.StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, start
}
