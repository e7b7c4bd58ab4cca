package cli

import (
	"runtime/debug"
	"strings"
	"testing"
)

// gcPercent reads the collector's percentage (debug.SetGCPercent has no
// getter: it sets want and returns what was there).
func gcPercent(want int) int { return debug.SetGCPercent(want) }

// TestPauseGCResumesWithThePercentItFound: pauseGC turns the collector
// off, its resume restores the percentage it found, once: a second call
// leaves a percentage set since alone.
func TestPauseGCResumesWithThePercentItFound(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(137))
	resume := pauseGC()
	if got := gcPercent(-1); got != -1 {
		t.Fatalf("paused: percent %d, want -1 (off)", got)
	}
	resume()
	if got := gcPercent(50); got != 137 {
		t.Fatalf("resumed: percent %d, want 137", got)
	}
	resume()
	if got := gcPercent(137); got != 50 {
		t.Errorf("resumed twice: percent %d, want 50 (set after the first resume)", got)
	}
}

// TestFailedAttachResumesTheCollector: an attach that fails inside its
// timed steps (here: no daemon at the socket) leaves the collector as it
// found it.
func TestFailedAttachResumesTheCollector(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(137))
	_, stderr, code, _ := runInProcess(t, "attach", "--socket", "/nonexistent/wcache.sock", "--model", writeTinyModel(t),
		"--device-capability", "x")
	if code != ExitNoDaemon || !strings.Contains(stderr, "does not exist") {
		t.Fatalf("attach to an absent socket: exit %d, %s", code, stderr)
	}
	if got := gcPercent(137); got != 137 {
		t.Errorf("after a failed attach: percent %d, want 137", got)
	}
}
