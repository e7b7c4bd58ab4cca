package daemon

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

func peerCtx(uid, gid uint32) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: PeerInfo{PID: 42, UID: uid, GID: gid}})
}

func TestAuthorizer(t *testing.T) {
	a := authorizer{ownUID: 1000, allowUIDs: []uint32{2000}, allowGIDs: []uint32{300}}
	for _, c := range []struct {
		uid, gid uint32
		ok       bool
	}{
		{1000, 1000, true}, // own uid
		{2000, 2000, true}, // allowed uid
		{3000, 300, true},  // allowed gid
		{0, 0, true},       // root (authz.go: it may use and steer)
		{65534, 65534, false},
	} {
		err := a.check(peerCtx(c.uid, c.gid), daemonv1.Daemon_Status_FullMethodName)
		if c.ok && err != nil {
			t.Errorf("uid %d gid %d refused: %v", c.uid, c.gid, err)
		}
		if !c.ok {
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "uid "+strconv.FormatUint(uint64(c.uid), 10)) {
				t.Errorf("uid %d gid %d: err = %v, want PERMISSION_DENIED naming the uid", c.uid, c.gid, err)
			}
		}
	}
	if err := a.check(context.Background(), daemonv1.Daemon_Status_FullMethodName); status.Code(err) != codes.PermissionDenied {
		t.Errorf("no peer: err = %v", err)
	}
	root := authorizer{ownUID: 0}
	if err := root.check(peerCtx(0, 0), daemonv1.Daemon_Stop_FullMethodName); err != nil {
		t.Errorf("a root daemon refused root: %v", err)
	}
}

func TestRecoverAsStatus(t *testing.T) {
	a := authorizer{ownUID: 1}
	info := &grpc.UnaryServerInfo{FullMethod: daemonv1.Daemon_Status_FullMethodName}
	_, err := a.unary(peerCtx(1, 1), nil, info, func(context.Context, any) (any, error) { panic("boom") })
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "boom") {
		t.Errorf("err = %v, want INTERNAL", err)
	}
}
