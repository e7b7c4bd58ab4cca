package daemonfile

import (
	"testing"
	"time"

	"github.com/wcache/wcache/sdk/procstat"
)

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
