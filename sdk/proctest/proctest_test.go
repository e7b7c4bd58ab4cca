package proctest

import (
	"os/exec"
	"testing"

	"github.com/wcache/wcache/sdk/procstat"
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
	if pid := ExitedPID(t); procstat.Running(pid) {
		t.Errorf("ExitedPID %d is running", pid)
	}
	pid, start := Sleeper(t)
	if got, err := procstat.StartTime(pid); !procstat.Running(pid) || err != nil || got != start {
		t.Errorf("Sleeper %d (start %d): running %v, start %d, %v", pid, start, procstat.Running(pid), got, err)
	}
}
