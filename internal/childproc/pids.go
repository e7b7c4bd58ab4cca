package childproc

import "os/exec"

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
// at the test's cleanup, and returns its pid: a live process that is no
// wcache daemon. (Its start time is procstat.StartTime's; this package
// imports nothing of the module.)
func Sleeper(t T) int {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}
