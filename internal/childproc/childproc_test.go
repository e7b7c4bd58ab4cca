package childproc

import (
	"os/exec"
	"syscall"
	"testing"
)

func TestStartPipedTalksAndEnds(t *testing.T) {
	cmd := exec.Command("/bin/cat")
	stdin, stdout := StartPiped(t, cmd)
	if _, err := stdin.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := stdout.ReadString('\n'); line != "ping\n" || err != nil {
		t.Fatalf("cat echoed %q, %v", line, err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("cat after stdin closed: %v", err)
	}
}

// A child the test leaves running is killed at the test's cleanup.
func TestStartPipedKillsAtCleanup(t *testing.T) {
	var cmd *exec.Cmd
	t.Run("leaves a child", func(t *testing.T) {
		cmd = exec.Command("/bin/sleep", "60")
		StartPiped(t, cmd)
	})
	if cmd.ProcessState == nil || cmd.ProcessState.Success() {
		t.Fatalf("sleep after the subtest's cleanup: %v, want killed", cmd.ProcessState)
	}
}

func TestExitedPIDAndSleeper(t *testing.T) {
	// Signal 0 asks whether the pid names a process (ours, so no EPERM).
	if pid := ExitedPID(t); syscall.Kill(pid, 0) != syscall.ESRCH {
		t.Errorf("ExitedPID %d names a process", pid)
	}
	if pid := Sleeper(t); syscall.Kill(pid, 0) != nil {
		t.Errorf("Sleeper %d is not running", pid)
	}
}
