package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
)

// NoticeKind is the kind of a daemon notice.
type NoticeKind int

const (
	// NoticeDraining: the daemon is stopping; release the lease before the
	// notice's Deadline.
	NoticeDraining NoticeKind = 1
)

// Notice is a message the daemon sends on an open lease.
type Notice struct {
	Kind     NoticeKind
	Message  string
	Deadline time.Time
}

// noticeBuffer is how many notices a lease queues for a slow reader before
// it drops new ones (the daemon sends one per drain).
const noticeBuffer = 8

// Attachment is a successful attach: the manifest and the lease that keeps
// it valid.
type Attachment struct {
	Manifest *Manifest
	Lease    *Lease
}

// Lease is an open Attach stream: while it is open the daemon keeps the
// weights in the manifest's handles. It is safe for concurrent use.
type Lease struct {
	id        uint64
	cancel    context.CancelFunc
	done      chan struct{}
	notices   chan Notice
	closeConn func() error

	mu     sync.Mutex
	closed bool
	err    error
}

// ID is the lease id the daemon assigned.
func (l *Lease) ID() uint64 { return l.id }

// Done is closed when the lease has ended: Close was called, the daemon
// ended it (stop, plugin crash) or the connection broke (the daemon died).
// A client that maps the daemon's memory must stop using it then.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err says why the lease ended: nil after Close, otherwise the stream's
// error (e.g. UNAVAILABLE "backend plugin exited: …"). It is nil while the
// lease is open.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Notices delivers the daemon's notices (NoticeDraining). The channel is
// never closed; select on Done as well.
func (l *Lease) Notices() <-chan Notice { return l.notices }

// Close releases the lease and waits until the stream has ended. It is
// idempotent. For an attachment made with the package-level Attach it also
// closes the connection.
func (l *Lease) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	<-l.done
	if l.closeConn != nil {
		return l.closeConn()
	}
	return nil
}

// run reads the stream until it ends.
func (l *Lease) run(stream daemonv1.Daemon_AttachClient) {
	defer close(l.done)
	for {
		ev, err := stream.Recv()
		if err != nil {
			l.mu.Lock()
			if !l.closed {
				l.err = fmt.Errorf("lease %d ended: %w", l.id, err)
			}
			l.mu.Unlock()
			l.cancel()
			return
		}
		if n := ev.GetNotice(); n != nil {
			notice := Notice{Kind: NoticeKind(n.GetKind()), Message: n.GetMessage()}
			if ms := n.GetDeadlineUnixMs(); ms != 0 {
				notice.Deadline = time.UnixMilli(ms)
			}
			select {
			case l.notices <- notice:
			default:
			}
		}
	}
}

// Attach sends cfg to the daemon and, on a match, returns the manifest and
// the open lease. ctx bounds the attach itself, not the lease (which lasts
// until Close or until the daemon ends it). A config mismatch is a
// *cacheconfig.MismatchError with every differing field; other refusals
// keep their gRPC status (status.Code works on them).
func (c *Client) Attach(ctx context.Context, cfg cacheconfig.Config) (*Attachment, error) {
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := c.rpc.Attach(sctx, &daemonv1.AttachRequest{Config: cfg.ToProto(), ClientName: c.clientName})
	if err != nil {
		cancel()
		return nil, c.attachError(err)
	}
	got := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			cancel()
		case <-got:
		}
	}()
	ev, err := stream.Recv()
	close(got)
	if err != nil {
		cancel()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("attach to %s: %w", c.socket, ctx.Err())
		}
		return nil, c.attachError(err)
	}
	pm := ev.GetManifest()
	if pm == nil {
		cancel()
		return nil, fmt.Errorf("attach to %s: first message is not a manifest: %w", c.socket, ErrBadManifest)
	}
	m, err := manifestFromProto(pm)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("attach to %s: %w", c.socket, err)
	}
	l := &Lease{id: m.LeaseID, cancel: cancel, done: make(chan struct{}), notices: make(chan Notice, noticeBuffer)}
	go l.run(stream)
	return &Attachment{Manifest: m, Lease: l}, nil
}

// attachError converts an Attach failure: a ConfigMismatch detail becomes
// a *cacheconfig.MismatchError.
func (c *Client) attachError(err error) error {
	st, ok := status.FromError(err)
	if ok && st.Code() == codes.FailedPrecondition {
		for _, d := range st.Details() {
			if cm, ok := d.(*daemonv1.ConfigMismatch); ok {
				me := &cacheconfig.MismatchError{}
				for _, fd := range cm.GetDiffs() {
					me.Diffs = append(me.Diffs, cacheconfig.FieldDiff{Field: fd.GetField(), Daemon: fd.GetDaemonValue(), Client: fd.GetClientValue()})
				}
				return me
			}
		}
	}
	return fmt.Errorf("attach to %s: %w", c.socket, err)
}

// Attach dials target and attaches with cfg. The connection belongs to the
// lease: closing the lease closes it. Errors are those of Dial and
// Client.Attach.
func Attach(ctx context.Context, target Target, cfg cacheconfig.Config, opts Options) (*Attachment, error) {
	c, err := Dial(ctx, target, opts)
	if err != nil {
		return nil, err
	}
	a, err := c.Attach(ctx, cfg)
	if err != nil {
		c.Close()
		return nil, err
	}
	a.Lease.closeConn = c.Close
	return a, nil
}

// IsMismatch reports whether err is a config mismatch, and returns it.
func IsMismatch(err error) (*cacheconfig.MismatchError, bool) {
	var me *cacheconfig.MismatchError
	ok := errors.As(err, &me)
	return me, ok
}
