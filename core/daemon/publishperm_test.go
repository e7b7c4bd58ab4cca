package daemon

import (
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestOnlyOwnAndAllowedUIDsChangeWeights: publish and evict are for the
// daemon's uid and --allow-uid peers; an --allow-gid peer may attach, not
// publish.
func TestOnlyOwnAndAllowedUIDsChangeWeights(t *testing.T) {
	own := uint32(os.Geteuid())
	other, allowed := own+1000, own+2000
	d := &Daemon{opts: Options{AllowUIDs: []uint32{allowed}, AllowGIDs: []uint32{4242}}}
	for _, c := range []struct {
		uid, gid uint32
		ok       bool
	}{{own, own, true}, {allowed, allowed, true}, {other, 4242, false}, {other, other, false}} {
		err := d.mayChangeWeights(PeerInfo{PID: 7, UID: c.uid, GID: c.gid})
		switch {
		case c.ok && err != nil:
			t.Errorf("uid %d: %v, want allowed", c.uid, err)
		case !c.ok && (status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "may not publish or evict")):
			t.Errorf("uid %d gid %d: %v, want PERMISSION_DENIED", c.uid, c.gid, err)
		}
	}
}
