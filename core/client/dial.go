package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/wcache/wcache/internal/defaults"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// Defaults of Options.
const (
	DefaultDialTimeout = 5 * time.Second
	// keepaliveTime and keepaliveTimeout detect a hung daemon; they respect
	// the daemon's enforcement policy (pings no more often than every 5 s).
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = 5 * time.Second
	// maxManifestSize bounds a received message: a manifest of 100k tensors
	// is a few MiB.
	maxManifestSize = 256 << 20
	// manifestWindow is the HTTP/2 flow-control window a connection and
	// each of its streams open with: large enough that the daemon sends a
	// 100k-tensor manifest in one go instead of waiting for a window
	// update every 64 KiB (gRPC's default start, grown only by its
	// bandwidth probe, which a one-attach CLI connection never finishes).
	// A window is credit, not a buffer: memory stays bounded by what
	// arrives (maxManifestSize).
	manifestWindow = 32 << 20
)

// Options tune Dial. The zero value is the default.
type Options struct {
	// AllowOwners lists socket owner uids accepted besides the caller's
	// effective uid (a daemon run by a service account, say).
	AllowOwners []uint32
	// ClientName is shown by `wcache status` next to the lease.
	ClientName string
	// DialTimeout bounds connecting (default 5 s).
	DialTimeout time.Duration
	// HandleKinds, when set, are the handle kinds the caller maps (e.g.
	// DefaultMappers().Kinds() and its vendors'): Attach sends them, and a
	// daemon whose handles are of another kind refuses with a
	// *HandleKindsError before a lease exists. nil: any kind (the caller
	// maps what it gets, or answers a *NotMappableError).
	HandleKinds []string
	// Content is how Attach proves the content of the files cfg.Model
	// names (Client.AttachFiles); the zero value is PolicyIdentity with
	// the default digest cache.
	Content ContentOptions
}

// Client is a connection to one daemon.
type Client struct {
	conn       *grpc.ClientConn
	dialer     *reuseDialer
	rpc        daemonv1.DaemonClient
	socket     string
	deviceUUID string
	clientName string
	kinds      []string
	content    ContentOptions
	// proofs: what deriving content proofs found (nil: nothing kept).
	proofs *proofCache
	// noDescriptors: this daemon's last manifest had no descriptor
	// handles; noAttachWait: it refused op ATTACH_WAIT (awaitDescriptors).
	noDescriptors, noAttachWait atomic.Bool
}

// Socket is the socket path the client connected to.
func (c *Client) Socket() string { return c.socket }

// DeviceUUID is the device UUID the target named ("" for BySocket).
func (c *Client) DeviceUUID() string { return c.deviceUUID }

// Close closes the connection (and with it every lease taken through it).
func (c *Client) Close() error {
	c.dialer.discard()
	return c.conn.Close()
}

// Dial finds the target's socket, applies the safety checks (see the
// package documentation) and connects. Errors: *NoDaemonError (ErrNoDaemon),
// *UnsafeSocketError (ErrUnsafeSocket), *DaemonDeadError (ErrDaemonDead),
// or a wrapped connection error.
func Dial(ctx context.Context, target Target, opts Options) (*Client, error) {
	defaults.Positive(&opts.DialTimeout, DefaultDialTimeout)
	socket, uuid, err := target.resolve(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkSocket(socket, uuid, opts.AllowOwners); err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	var d net.Dialer
	first, err := d.DialContext(dctx, "unix", socket)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, &DaemonDeadError{Socket: socket, Err: err}
		}
		return nil, fmt.Errorf("connect to daemon socket %s: %w", socket, err)
	}
	dialer := &reuseDialer{first: first, socket: socket}
	conn, err := grpc.NewClient("passthrough:///wcache-daemon",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dialer.dial),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxManifestSize)),
		grpc.WithInitialWindowSize(manifestWindow), grpc.WithInitialConnWindowSize(manifestWindow),
	)
	if err != nil {
		first.Close()
		return nil, fmt.Errorf("daemon client for %s: %w", socket, err)
	}
	// gRPC connects lazily; finish the handshake now, on the connection just
	// checked. Left idle until a first call, it would be closed by the
	// daemon's handshake timeout, and a peer that accepts but does not speak
	// the protocol would only show up later as an obscure call failure.
	if err := waitReady(dctx, conn); err != nil {
		conn.Close()
		dialer.discard()
		return nil, fmt.Errorf("connect to daemon socket %s: no gRPC handshake (is a wcache daemon listening?): %w", socket, err)
	}
	return &Client{conn: conn, dialer: dialer, rpc: daemonv1.NewDaemonClient(conn), socket: socket, deviceUUID: uuid,
		clientName: opts.ClientName, kinds: opts.HandleKinds, content: opts.Content, proofs: newProofCache()}, nil
}

// waitReady connects conn and waits until it is ready, failed or ctx ends.
func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	conn.Connect()
	for {
		st := conn.GetState()
		switch st {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return fmt.Errorf("connection %s", st)
		}
		if !conn.WaitForStateChange(ctx, st) {
			return ctx.Err()
		}
	}
}

// reuseDialer hands gRPC the connection Dial already checked, and dials the
// same path again should gRPC reconnect.
type reuseDialer struct {
	mu     sync.Mutex
	first  net.Conn
	socket string
}

func (r *reuseDialer) dial(ctx context.Context, _ string) (net.Conn, error) {
	r.mu.Lock()
	c := r.first
	r.first = nil
	r.mu.Unlock()
	if c != nil {
		return c, nil
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", r.socket)
}

// discard closes the checked connection if gRPC never took it (a client
// closed before its first call).
func (r *reuseDialer) discard() {
	r.mu.Lock()
	c := r.first
	r.first = nil
	r.mu.Unlock()
	if c != nil {
		c.Close()
	}
}
