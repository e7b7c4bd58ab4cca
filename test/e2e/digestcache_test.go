package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRestartTakesDigestsFromTheCacheWithPeerFillOff: `wcache serve`
// stores its files' content digests in the user's digest cache, and a
// restart takes them from there instead of hashing every byte, also with
// --peer-fill=off (the cache is a restart's, not only a peer fill's).
func TestRestartTakesDigestsFromTheCacheWithPeerFillOff(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	for i, want := range []string{"files_from_digest_cache=0", fmt.Sprintf("files_from_digest_cache=%d", len(model.Files))} {
		d := h.startServe(0, model.Dir, "--peer-fill=off")
		h.mustRun("stop", "--device-uuid", h.UUIDs[0])
		if code := h.waitExit(d, 30*time.Second); code != 0 {
			t.Fatalf("serve %d exited %d", i+1, code)
		}
		if !strings.Contains(d.Stderr(), "content digests:") || !strings.Contains(d.Stderr(), want) {
			t.Fatalf("serve %d with --peer-fill=off: want a content digests line with %s\n%s", i+1, want, d.Stderr())
		}
	}
}
