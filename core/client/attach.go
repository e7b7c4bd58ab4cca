package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/fdchannel"
)

// Attachment is a successful attach: the manifest and the lease that keeps
// it valid.
type Attachment struct {
	Manifest *Manifest
	Lease    *Lease
}

// Attach sends cfg to the daemon and, on a match, returns the manifest and
// the open lease. ctx bounds the attach itself, not the lease (which lasts
// until Close or until the daemon ends it). It proves the content of the
// checkpoint files cfg.Model names (AttachFiles with nil files, under
// Options.Content): a same-header copy with other bytes never gets the
// daemon's weights. A config mismatch is a
// *cacheconfig.MismatchError with every differing field; a manifest that
// does not hold together is ErrBadManifest, and one for another device
// than the UUID the client was dialed by (ByDeviceUUID, ByOrdinal) a
// *DeviceMismatchError (also ErrBadManifest); a daemon that holds no
// weights an *EmptyError (ErrEmpty: load from disk); a daemon draining or
// stopping a *PublishConflictError (ErrBusy: ask again later); content
// not proven or other content AttachFiles' errors; other refusals keep
// their gRPC status (status.Code works on them).
func (c *Client) Attach(ctx context.Context, cfg cacheconfig.Config) (*Attachment, error) {
	return c.AttachFiles(ctx, cfg, nil, c.content)
}

// AttachForCopy attaches to copy the daemon's memory together with its
// content records, not to use it as the files' weights: a successor
// daemon taking the weights over, a sibling daemon's fill (which checks
// its copy itself). It carries no file proof (ContentProof.memory_copy);
// the daemon answers it to its own uid and root only. Errors as Attach.
func (c *Client) AttachForCopy(ctx context.Context, cfg cacheconfig.Config) (*Attachment, error) {
	return c.attach(ctx, cfg, &daemonv1.ContentProof{MemoryCopy: true})
}

// attach makes the Attach RPC with proof and starts the lease.
func (c *Client) attach(ctx context.Context, cfg cacheconfig.Config, proof *daemonv1.ContentProof) (*Attachment, error) {
	o, err := c.open(ctx, cfg, proof, true)
	if err != nil {
		return nil, err
	}
	l := &Lease{id: o.m.LeaseID, cancel: o.cancel, done: make(chan struct{}), notices: make(chan Notice, noticeBuffer),
		files: o.files, stop: make(chan struct{}), c: c, cfg: cfg, proof: proof, m: o.m}
	go l.run(o.stream)
	return &Attachment{Manifest: o.m, Lease: l}, nil
}

// opened is one successful Attach RPC: its stream, manifest, descriptors
// and the cancel that ends it.
type opened struct {
	stream daemonv1.Daemon_AttachClient
	m      *Manifest
	files  []*os.File
	cancel context.CancelFunc
}

// open makes the Attach RPC and receives the manifest and its descriptors
// (Attach's errors); early lets it ask for the descriptors before the
// Attach (awaitDescriptors).
func (c *Client) open(ctx context.Context, cfg cacheconfig.Config, proof *daemonv1.ContentProof, early bool, callOpts ...grpc.CallOption) (*opened, error) {
	sctx, cancel := context.WithCancel(context.Background())
	// ctx bounds the stream's creation (with grpc.WaitForReady, the wait
	// for a daemon to listen: a lease resuming after a handover whose
	// successor is gone would otherwise wait forever, and its Close with
	// it) and the wait for the manifest, only: once it has arrived, the
	// lease lives until Close, whatever happens to ctx. (A select on both
	// ctx.Done and a "got it" channel is not enough: when both are ready it
	// picks at random, and a caller that cancels ctx right after Attach
	// returned would lose its lease half of the time.)
	var mu sync.Mutex
	received := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !received {
			cancel()
		}
	})
	wait, waitToken := c.awaitDescriptors(ctx, early)
	defer func() {
		if wait != nil {
			wait.Close()
		}
	}()
	stream, err := c.rpc.Attach(sctx, &daemonv1.AttachRequest{Config: cfg.ToProto(), ClientName: c.clientName, TensorTable: true,
		HandleKinds: c.kinds, Content: proof, FdWaitToken: waitToken}, callOpts...)
	if err != nil {
		stop()
		cancel()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("attach to %s: %w", c.socket, ctx.Err())
		}
		return nil, c.attachError(err)
	}
	ev, err := stream.Recv()
	mu.Lock()
	received = true
	mu.Unlock()
	stop()
	if err == nil && sctx.Err() != nil {
		// ctx ended just as the manifest arrived: the stream is cancelled.
		err = sctx.Err()
	}
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
	// A daemon found by UUID must serve that UUID: a socket whose daemon
	// holds another GPU's memory is refused, whatever its config says.
	if c.deviceUUID != "" && m.DeviceUUID != c.deviceUUID {
		cancel()
		return nil, &DeviceMismatchError{Socket: c.socket, Want: c.deviceUUID, Got: m.DeviceUUID}
	}
	var files []*os.File
	c.noDescriptors.Store(descriptorHandles(m.Handles) == 0)
	if descriptorHandles(m.Handles) > 0 {
		early := wait
		wait = nil // fetchDescriptors receives or closes it
		if files, err = c.fetchDescriptors(ctx, fdchannel.OpLease, m.LeaseID, m.FDToken, m.Handles, early); err != nil {
			cancel()
			return nil, fmt.Errorf("attach to %s: %w", c.socket, err)
		}
	}
	return &opened{stream: stream, m: m, files: files, cancel: cancel}, nil
}

// attachError converts an Attach failure: a ConfigMismatch detail becomes
// a *cacheconfig.MismatchError, a NoWeights detail an *EmptyError, a
// ContentRefused detail a *ContentRefusedError.
func (c *Client) attachError(err error) error {
	st, ok := status.FromError(err)
	if ok && st.Code() == codes.NotFound {
		for _, d := range st.Details() {
			if nw, ok := d.(*daemonv1.NoWeights); ok {
				return emptyFromProto(c.socket, nw)
			}
		}
	}
	if ok && st.Code() == codes.FailedPrecondition {
		for _, d := range st.Details() {
			if cm, ok := d.(*daemonv1.ConfigMismatch); ok {
				return mismatchFromProto(cm)
			}
			if hk, ok := d.(*daemonv1.HandleKindsRefused); ok {
				return &HandleKindsError{Socket: c.socket, Daemon: hk.GetDaemonKinds(), Client: hk.GetClientKinds(), Message: st.Message()}
			}
			if cr, ok := d.(*daemonv1.ContentRefused); ok {
				return contentRefusedFromProto(c.socket, cr, st.Message())
			}
		}
	}
	if ok && st.Code() == codes.Unavailable {
		for _, d := range st.Details() {
			if pc, ok := d.(*daemonv1.PublishConflict); ok {
				ce := conflictFromProto(c.socket, pc, st.Message()) // draining or stopping: ErrBusy
				ce.rpcErr = err
				return ce
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
