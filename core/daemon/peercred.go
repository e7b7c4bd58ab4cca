package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// PeerInfo is the credentials.AuthInfo of a connection to the daemon: the
// peer process's credentials as the kernel reports them (SO_PEERCRED), read
// once when the connection is accepted.
type PeerInfo struct {
	credentials.CommonAuthInfo
	PID int32
	UID uint32
	GID uint32
}

// AuthType implements credentials.AuthInfo.
func (PeerInfo) AuthType() string { return "peercred" }

// peerCredentials is a grpc TransportCredentials that performs no handshake
// on the wire (clients dial with insecure credentials) and only reads the
// peer's SO_PEERCRED from the accepted Unix connection.
type peerCredentials struct{}

// ServerHandshake reads the peer credentials of conn (or takes those the
// peerListener read at accept). A connection that is not a Unix socket, or
// whose credentials cannot be read, is refused.
func (peerCredentials) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if pc, ok := conn.(*peerConn); ok {
		return conn, pc.info, nil
	}
	info, err := readPeerCred(conn)
	if err != nil {
		return nil, nil, err
	}
	return conn, info, nil
}

// ClientHandshake is not used: the daemon only accepts connections.
func (peerCredentials) ClientHandshake(_ context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, PeerInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (peerCredentials) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "peercred"}
}

func (c peerCredentials) Clone() credentials.TransportCredentials { return c }

func (peerCredentials) OverrideServerName(string) error { return nil }

// readPeerCred reads SO_PEERCRED from a Unix connection.
func readPeerCred(conn net.Conn) (PeerInfo, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return PeerInfo{}, fmt.Errorf("peer credentials: %T is not a socket", conn)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return PeerInfo{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return PeerInfo{}, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return PeerInfo{}, fmt.Errorf("peer credentials (SO_PEERCRED): %w", credErr)
	}
	return PeerInfo{
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity},
		PID:            cred.Pid, UID: cred.Uid, GID: cred.Gid,
	}, nil
}

// peerFrom returns the PeerInfo of an RPC's connection.
func peerFrom(ctx context.Context) (PeerInfo, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return PeerInfo{}, false
	}
	info, ok := p.AuthInfo.(PeerInfo)
	return info, ok
}

// authorizer decides which peers may use the daemon.
type authorizer struct {
	ownUID    uint32
	allowUIDs []uint32
	allowGIDs []uint32
	// denied, when set, is told the full method name of every refused
	// stream RPC.
	denied func(fullMethod string)
}

// errNoPeerCred: a connection without peer credentials (never from the
// daemon's own listener).
var errNoPeerCred = errors.New("connection carries no peer credentials")

// check returns nil when the peer of ctx may call the operation
// fullMethod (authorize, authz.go), else a PERMISSION_DENIED status naming
// the operation, the peer's class and uid.
func (a authorizer) check(ctx context.Context, fullMethod string) error {
	p, ok := peerFrom(ctx)
	if !ok {
		return status.Error(codes.PermissionDenied, errNoPeerCred.Error())
	}
	if err := a.authorize(fullMethod, p); err != nil {
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return nil
}

// allows reports whether peer p may use the daemon at all (a class other
// than ClassOther): the connection limits of connlimit.go tell admitted
// peers from the others by it.
func (a authorizer) allows(p PeerInfo) bool {
	return a.classOf(p) != ClassOther
}

// unary is the unary interceptor: authorization (authorize, by the full
// method name), then a panic guard so that even a bug answers with a
// structured error instead of a closed stream.
func (a authorizer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	method := ""
	if info != nil {
		method = info.FullMethod
	}
	if err := a.check(ctx, method); err != nil {
		return nil, err
	}
	defer recoverAsStatus(&err)
	return h(ctx, req)
}

// stream is the stream interceptor, as unary; a refusal is reported to
// denied.
func (a authorizer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	method := ""
	if info != nil {
		method = info.FullMethod
	}
	if err := a.check(ss.Context(), method); err != nil {
		if a.denied != nil && info != nil {
			a.denied(info.FullMethod)
		}
		return err
	}
	defer recoverAsStatus(&err)
	return h(srv, ss)
}

// recoverAsStatus turns a panic of a handler into an INTERNAL status.
func recoverAsStatus(err *error) {
	if r := recover(); r != nil {
		*err = status.Errorf(codes.Internal, "daemon internal error: %v", r)
	}
}
