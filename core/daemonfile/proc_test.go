package daemonfile

import (
	"fmt"
	"testing"
	"time"

	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/internal/procstat"
)

// waitState polls until procstat.Inspect(pid, start) == want.
func waitState(t *testing.T, pid int, start uint64, want procstat.State) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, fmt.Sprintf("pid %d in state %s", pid, want), func() bool {
		return procstat.Inspect(pid, start) == want
	})
}
