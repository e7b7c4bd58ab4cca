package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/fdchannel"
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
	// stop is closed by Close (a re-attach in progress gives up); c, cfg,
	// proof (the attach's content proof, sent again) and m re-attach after
	// a takeover (resume).
	stop     chan struct{}
	stopOnce sync.Once
	c        *Client
	cfg      cacheconfig.Config
	proof    *daemonv1.ContentProof
	m        *Manifest

	mu     sync.Mutex
	closed bool
	err    error
}

// ID is the lease id the daemon assigned (after a takeover, the
// successor's lease id).
func (l *Lease) ID() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id
}

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
	cancel := l.cancel
	l.mu.Unlock()
	if l.stop != nil {
		l.stopOnce.Do(func() { close(l.stop) })
	}
	cancel()
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

// run reads the stream until it ends. A stream that the daemon ended
// because it handed its memory over to a successor (serve --takeover:
// UNAVAILABLE with fdchannel.HandoverMessage) is resumed on the successor
// (resume): the lease stays open, Done is not closed, and the manifest,
// its mappings and descriptors stay valid.
func (l *Lease) run(stream daemonv1.Daemon_AttachClient) {
	defer close(l.done)
	for {
		ev, err := stream.Recv()
		if err != nil {
			if next := l.resume(err); next != nil {
				stream = next
				continue
			}
			l.mu.Lock()
			if !l.closed {
				l.err = fmt.Errorf("lease %d ended: %w", l.id, err)
			}
			cancel := l.cancel
			l.mu.Unlock()
			cancel()
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

// Re-attach after a takeover: the successor has the memory before the old
// daemon ends the leases, but listens only once that daemon is gone.
const (
	// ResumeWindow bounds how long a lease tries to re-attach to the
	// successor before it ends with the handover error.
	ResumeWindow = 30 * time.Second
	resumeRetry  = 50 * time.Millisecond
)

// resume re-attaches after a handover (err carries
// fdchannel.HandoverMessage) with the lease's config, until ResumeWindow
// passes or Close is called. The new lease replaces the ended one only if
// it serves the same generation of the same device with the same handles;
// its own descriptors are closed (the lease keeps those it had, of the
// same memory). nil: not a handover, or no successor serving the same
// weights — the lease ends.
func (l *Lease) resume(err error) daemonv1.Daemon_AttachClient {
	if l.c == nil || l.m == nil || status.Code(err) != codes.Unavailable ||
		!strings.Contains(status.Convert(err).Message(), fdchannel.HandoverMessage) {
		return nil
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil
	}
	deadline := time.Now().Add(ResumeWindow)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		go func() {
			select {
			case <-l.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		// No early descriptor request: the Attach may wait for a successor
		// longer than a daemon keeps one (awaitDescriptors).
		o, err := l.c.open(ctx, l.cfg, l.proof, false, grpc.WaitForReady(true))
		cancel()
		select {
		case <-l.stop:
			if o != nil {
				o.cancel()
				closeHandleFiles(o.files)
			}
			return nil
		default:
		}
		if err != nil {
			if status.Code(err) == codes.Unavailable || errors.Is(err, context.DeadlineExceeded) {
				time.Sleep(resumeRetry)
				continue
			}
			return nil // another daemon, other weights: they are gone
		}
		closeHandleFiles(o.files)
		if !sameWeights(l.m, o.m) {
			o.cancel()
			return nil
		}
		l.mu.Lock()
		l.id, l.cancel = o.m.LeaseID, o.cancel
		l.mu.Unlock()
		return o.stream
	}
	return nil
}

// sameWeights reports whether b serves what a did: the same device,
// generation and handles (kind and size).
func sameWeights(a, b *Manifest) bool {
	if a.DeviceUUID != b.DeviceUUID || a.Generation != b.Generation || len(a.Handles) != len(b.Handles) {
		return false
	}
	for i := range a.Handles {
		if a.Handles[i].Kind != b.Handles[i].Kind || a.Handles[i].Size != b.Handles[i].Size {
			return false
		}
	}
	return true
}
