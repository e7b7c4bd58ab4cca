package client

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
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

// Lease is an open Attach stream: while it is open the daemon keeps the
// weights in the manifest's handles. It is safe for concurrent use.
type Lease struct {
	id        uint64
	cancel    context.CancelFunc
	done      chan struct{}
	notices   chan Notice
	closeConn func() error
	// files are the manifest's descriptors (descriptor handles), closed
	// by Close.
	files []*os.File

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
	l.mu.Lock()
	closeHandleFiles(l.files)
	l.files = nil
	l.mu.Unlock()
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
			select {
			case l.notices <- noticeFromProto(n):
			default:
			}
		}
	}
}
