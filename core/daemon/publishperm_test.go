package daemon

import (
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestOnlyOwnerAndRootChangeWeights: what an attach's sibling fill may do
// (mayChangeWeights) follows the Publish row of the authorization table:
// the daemon's uid and root; guests (--allow-uid, --allow-gid) may
// attach, not change what the daemon holds.
func TestOnlyOwnerAndRootChangeWeights(t *testing.T) {
	own := uint32(os.Geteuid())
	other, allowed := own+1000, own+2000
	d := &Daemon{opts: Options{AllowUIDs: []uint32{allowed}, AllowGIDs: []uint32{4242}}}
	for _, c := range []struct {
		uid, gid uint32
		ok       bool
	}{{own, own, true}, {0, 0, true}, {allowed, allowed, false}, {other, 4242, false}, {other, other, false}} {
		err := d.mayChangeWeights(PeerInfo{PID: 7, UID: c.uid, GID: c.gid})
		switch {
		case c.ok && err != nil:
			t.Errorf("uid %d: %v, want allowed", c.uid, err)
		case !c.ok && (status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "Publish")):
			t.Errorf("uid %d gid %d: %v, want PERMISSION_DENIED", c.uid, c.gid, err)
		}
	}
}
