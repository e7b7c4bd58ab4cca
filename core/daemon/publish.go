package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/sdk"
)

// maxPublishTensors bounds a publish's tensor_count.
const maxPublishTensors = 1 << 20

// Publish adds a generation of a client's tensors beside those the daemon
// holds, in the order of docs/protocol.md ("Publish"): begin (+ tensors) →
// plan → commit → done. Whatever ends the stream before the commit is
// installed frees its allocations and forgets its generation; the other
// generations and their leases are untouched.
func (s *service) Publish(stream daemonv1.Daemon_PublishServer) error {
	d := s.d
	ctx := stream.Context()
	p, _ := peerFrom(ctx) // authorized by the interceptor (authz.go)
	deadline := time.NewTimer(d.opts.PublishTimeout)
	defer deadline.Stop()
	msgs := receiveAll(ctx, stream)
	next := func(pub *publisher) (*daemonv1.PublishRequest, error) {
		var ended <-chan struct{}
		if pub != nil {
			ended = pub.ended
		}
		select {
		case r := <-msgs:
			if r.err != nil {
				return nil, r.err
			}
			return r.req, nil
		case <-deadline.C:
			return nil, status.Errorf(codes.DeadlineExceeded, "publish did not commit within %s", d.opts.PublishTimeout)
		case <-ended:
			return nil, status.Errorf(codes.Unavailable, "daemon of %s is stopping: publish aborted", d.info.DeviceUUID)
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}

	first, err := next(nil)
	if err != nil {
		return err
	}
	begin := first.GetBegin()
	switch {
	case begin == nil:
		return status.Error(codes.InvalidArgument, "publish: the first message must be begin")
	case begin.GetConfig() == nil:
		return status.Error(codes.InvalidArgument, "publish: begin carries no config")
	case begin.GetTensorCount() == 0 || begin.GetTensorCount() > maxPublishTensors:
		return status.Errorf(codes.InvalidArgument, "publish: tensor_count %d: want 1 to %d", begin.GetTensorCount(), maxPublishTensors)
	}
	name := begin.GetClientName()
	if len(name) > maxClientNameLen {
		name = name[:maxClientNameLen]
	}
	cfg, err := d.publishConfig(ctx, cacheconfig.FromProto(begin.GetConfig()))
	if err != nil {
		return err
	}
	if err := d.checkLayout(cfg); err != nil {
		return err
	}
	// A generation of its own, beside those the daemon holds; the same
	// config twice is a conflict.
	pub, g, err := d.reg.beginPublish(p, name, cfg, compareFor(true, len(begin.GetFiles()), cfg.EngineName), time.Now())
	if err != nil {
		return conflictStatus(err)
	}
	d.log.Info("publish begins", "pid", p.PID, "uid", p.UID, "client", name, "generation", g.id, "config_digest", g.digest)
	var ids []sdk.AllocationID
	var m *manifest
	committed := false
	defer func() {
		if committed {
			return
		}
		d.freeAllocs(ids)
		if m != nil {
			m.files.close()
		}
		if d.reg.abortPublish(pub) {
			d.log.Warn("publish aborted: its generation is forgotten, the others are untouched", "pid", p.PID,
				"generation", g.id, "allocations_freed", len(ids))
		}
		d.reportHeld()
	}()

	if err := checkMetadata(begin.GetMetadata()); err != nil {
		return err
	}
	var budget tableBudget
	specs := begin.GetTensors()
	if err := budget.add(specs); err != nil {
		return err
	}
	for uint32(len(specs)) < begin.GetTensorCount() {
		req, err := next(pub)
		if err != nil {
			return err
		}
		more := req.GetTensors()
		if more == nil {
			return status.Errorf(codes.InvalidArgument, "publish: %d of %d table entries received, then a message that is not tensors",
				len(specs), begin.GetTensorCount())
		}
		if err := budget.add(more.GetTensors()); err != nil {
			return err
		}
		specs = append(specs, more.GetTensors()...)
	}
	if uint32(len(specs)) != begin.GetTensorCount() {
		return status.Errorf(codes.InvalidArgument, "publish: tensor_count is %d, the table has %d entries", begin.GetTensorCount(), len(specs))
	}
	pl, err := plan.BuildTable(tableEntries(specs), d.opts.Plan)
	if err != nil {
		code := codes.InvalidArgument
		if errors.Is(err, plan.ErrInvalidOptions) {
			code = codes.Internal
		}
		return status.Errorf(code, "publish: %v", err)
	}
	begun := time.Now()
	reserved, err := d.allocatePublish(ctx, pl, g, &ids)
	if err != nil {
		return err
	}
	handles, err := d.export(ctx, ids)
	if err != nil {
		return backendStatus("publish", err)
	}
	m = newManifest(d.info.DeviceUUID, d.info.Backend, g.configProto, g.digest, g.id, pl, handles)
	var publishID uint64
	var fdToken []byte
	if m.files != nil {
		d.reg.setPublishFiles(pub, m.files)
		publishID, fdToken = pub.id, pub.token[:]
	}
	for i, spec := range specs {
		m.tensors[i].Layout = spec.GetLayout()
	}
	m.metadata = begin.GetMetadata()
	m.published = true
	m.content, m.policies = begin.GetFiles(), cacheconfig.PolicyStrings(d.opts.ContentPolicies)
	if err := stream.Send(m.publishPlan(publishID, fdToken)); err != nil {
		return err
	}

	req, err := next(pub)
	if err != nil {
		return err
	}
	commit := req.GetCommit()
	if commit == nil {
		return status.Error(codes.InvalidArgument, "publish: the message after the plan must be commit")
	}
	// The publisher's write access ends here, before anything is checked:
	// sealed against writes, no descriptor it holds can change a byte, and
	// a writable mapping it kept refuses the commit.
	if err := d.sealWrites(m, false); err != nil {
		if errors.Is(err, sdk.ErrWritableMapping) {
			return status.Errorf(codes.FailedPrecondition,
				"publish: %v: unmap every writable mapping of the plan's handles before the commit (the publisher's write access ends at the commit)", err)
		}
		return status.Errorf(codes.Internal, "publish: %v", err)
	}
	verified, err := d.verifyPublish(ctx, pl, ids, commit.GetSha256())
	if err != nil {
		return err
	}
	stats := LoadStats{Bytes: pl.Bytes, AllocatedBytes: reserved, Allocations: len(pl.Allocations),
		Duration: time.Since(begun)}
	if err := d.install(pub, ids, m, stats); err != nil {
		return err
	}
	committed = true
	d.metrics.Loaded(stats, len(pl.Tensors))
	d.log.Info("published", "pid", p.PID, "generation", g.id, "tensors", len(pl.Tensors), "bytes", pl.Bytes,
		"allocations", len(ids), "verified", verified, "config_digest", m.digest)
	return stream.Send(m.publishDone(pl.Bytes, verified))
}

// received is one message (or the error ending the stream) of a publisher.
type received struct {
	req *daemonv1.PublishRequest
	err error
}

// receiveAll receives the stream's messages in a goroutine of their own, so
// that the handler can wait for them with a deadline. The goroutine ends
// with the stream (the handler returning cancels ctx).
func receiveAll(ctx context.Context, stream daemonv1.Daemon_PublishServer) <-chan received {
	out := make(chan received)
	go func() {
		for {
			req, err := stream.Recv()
			select {
			case out <- received{req, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return out
}

// mayChangeWeights: whether p may change what the daemon holds as a
// publish does (the sibling fill of an attach, attachfill.go): the
// Publish row of the authorization table (authz.go).
func (d *Daemon) mayChangeWeights(p PeerInfo) error {
	if err := d.authorizer().authorize(daemonv1.Daemon_Publish_FullMethodName, p); err != nil {
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return nil
}

// publishConfig completes a publisher's config as file loads are completed
// (protocol version, device capability) and validates it.
func (d *Daemon) publishConfig(ctx context.Context, c cacheconfig.Config) (cacheconfig.Config, error) {
	if c.ProtocolVersion == 0 {
		c.ProtocolVersion = daemonv1.ProtocolVersion
	}
	if c.DeviceCapability == "" {
		devs, err := d.backend.Devices(ctx)
		if err != nil {
			return c, backendStatus("publish: device capability", err)
		}
		for _, dev := range devs {
			if dev.Ordinal == d.opts.GPU {
				c.DeviceCapability = dev.Capability
			}
		}
	}
	if err := c.Validate(); err != nil {
		return c, status.Errorf(codes.InvalidArgument, "publish: %v", err)
	}
	return c, nil
}

// emptyConfigProto is the config an empty daemon shows in Status: its kept
// parallel layout (KeepLayout), or nil.
func (d *Daemon) emptyConfigProto() *configv1.CacheConfig {
	if !d.opts.KeepLayout {
		return nil
	}
	return d.opts.Config.ParallelLayout().ToProto()
}

// checkLayout refuses a publish whose parallel layout differs from the one
// the daemon keeps (KeepLayout): FAILED_PRECONDITION with a ConfigMismatch
// detail listing the layout fields that differ.
func (d *Daemon) checkLayout(c cacheconfig.Config) error {
	if !d.opts.KeepLayout {
		return nil
	}
	if diffs := cacheconfig.Compare(d.opts.Config.ParallelLayout(), c.ParallelLayout()); len(diffs) > 0 {
		return mismatchStatus(diffs)
	}
	return nil
}

// tableEntries converts the wire table for the planner.
func tableEntries(specs []*daemonv1.TensorSpec) []plan.Entry {
	out := make([]plan.Entry, len(specs))
	for i, s := range specs {
		out[i] = plan.Entry{Name: s.GetName(), DType: s.GetDtype(), Shape: s.GetShape(), Length: s.GetLength(),
			Storage: s.GetLayout().GetStorage()}
	}
	return out
}

// verifyPublish checks a commit's digests. Without VerifyPublish they are
// ignored (false, nil); with it they are required and every distinct range
// is digested by the backend: a difference is DATA_LOSS.
func (d *Daemon) verifyPublish(ctx context.Context, pl *plan.Plan, ids []sdk.AllocationID, sums [][]byte) (bool, error) {
	if len(sums) != 0 && len(sums) != len(pl.Tensors) {
		return false, status.Errorf(codes.InvalidArgument, "publish: commit carries %d digests for %d tensors", len(sums), len(pl.Tensors))
	}
	if !d.opts.VerifyPublish {
		return false, nil
	}
	if len(sums) == 0 {
		return false, status.Error(codes.InvalidArgument, "publish: this daemon runs with --verify-publish: the commit must carry a SHA-256 per tensor")
	}
	type rangeKey struct {
		handle         uint32
		offset, length uint64
	}
	// Per arena: the distinct ranges and, for each, the first tensor
	// that names it.
	ranges := make([][]sdk.Range, len(ids))
	owners := make([][]int, len(ids))
	seen := map[rangeKey]int{}
	for i, t := range pl.Tensors {
		k := rangeKey{t.Handle, t.Offset, t.Length}
		if j, ok := seen[k]; ok {
			if !bytes.Equal(sums[i], sums[j]) {
				return false, status.Errorf(codes.DataLoss, "publish: tensors %q and %q share a storage but their digests differ", pl.Tensors[j].Name, t.Name)
			}
			continue
		}
		seen[k] = i
		ranges[t.Handle] = append(ranges[t.Handle], sdk.Range{Offset: t.Offset, Length: t.Length})
		owners[t.Handle] = append(owners[t.Handle], i)
	}
	for a, id := range ids {
		if len(ranges[a]) == 0 {
			continue
		}
		got, err := d.backend.Digest(ctx, id, ranges[a])
		if err != nil {
			return false, backendStatus("publish: digest", err)
		}
		for r, sum := range got {
			i := owners[a][r]
			if !bytes.Equal(sum[:], sums[i]) {
				return false, status.Errorf(codes.DataLoss, "publish: tensor %q: SHA-256 in memory is %x, the commit says %x", pl.Tensors[i].Name, sum, sums[i])
			}
		}
	}
	return true, nil
}

// allocatePublish admits the plan beside every generation held (a
// *MemoryError is RESOURCE_EXHAUSTED, before anything is allocated) and
// allocates its arenas into *ids; the bytes the backend reserved count as
// g's from then on.
func (d *Daemon) allocatePublish(ctx context.Context, pl *plan.Plan, g *generation, ids *[]sdk.AllocationID) (uint64, error) {
	d.allocMu.Lock()
	defer d.allocMu.Unlock()
	if err := d.admit(ctx, "publish", pl.AllocatedBytes(), g); err != nil {
		return 0, memoryStatus(err)
	}
	reserved, err := d.allocate(ctx, pl, ids)
	d.reg.mu.Lock()
	g.load.AllocatedBytes = reserved
	d.reg.mu.Unlock()
	d.reportHeld()
	if err != nil {
		return 0, backendStatus("publish", err)
	}
	return reserved, nil
}

// install makes the committed publish a serving generation, unless the
// daemon began stopping under it.
func (d *Daemon) install(pub *publisher, ids []sdk.AllocationID, m *manifest, stats LoadStats) error {
	ok := d.reg.finishPublish(pub, true, func(g *generation) {
		g.allocs, g.manifest, g.load = ids, m, stats
		g.tensors, g.planned, g.started = len(m.tensors), 0, time.Now()
		if reason := d.reg.takeAttachFallbackLocked(g.digest); g.load.FillFallback == "" {
			// A peer fill of an attach of this config failed before.
			g.load.FillFallback = reason
		}
	})
	if !ok {
		return status.Errorf(codes.Unavailable, "daemon of %s is stopping: publish aborted", d.info.DeviceUUID)
	}
	d.reportHeld()
	if err := d.rewriteReady(); err != nil {
		// The ready file still says what it said: the daemon serves all the
		// same, discovery goes by the socket.
		d.log.Warn("rewriting the ready file after a publish", "error", err)
	}
	return nil
}

// backendStatus converts a backend failure into a gRPC status: out of memory
// is RESOURCE_EXHAUSTED, a plugin that is gone UNAVAILABLE, the rest
// INTERNAL.
func backendStatus(what string, err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, sdk.ErrOutOfMemory):
		code = codes.ResourceExhausted
	case errors.Is(err, sdk.ErrUnavailable), errors.Is(err, ErrPluginExited):
		code = codes.Unavailable
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Errorf(code, "%s: %v", what, err)
}

// memoryStatus converts admit's refusal into RESOURCE_EXHAUSTED with its
// numbers; another error (the backend could not say its free memory) goes
// through backendStatus.
func memoryStatus(err error) error {
	if me, ok := errors.AsType[*MemoryError](err); ok {
		return status.Error(codes.ResourceExhausted, me.Error())
	}
	return backendStatus("publish", err)
}

// noWeightsStatus is the NOT_FOUND answer of an Attach to a daemon that
// holds no weights.
func noWeightsStatus(deviceUUID string, st State, publisherPID int32) error {
	msg := fmt.Sprintf("daemon of %s is empty: no cached weights", deviceUUID)
	if st == StatePublishing {
		msg = fmt.Sprintf("daemon of %s holds no weights yet (empty): publish in progress by pid %d", deviceUUID, publisherPID)
	}
	s := status.New(codes.NotFound, msg)
	withDetail, err := s.WithDetails(noWeightsToProto(st, publisherPID))
	if err != nil {
		return s.Err()
	}
	return withDetail.Err()
}

// busyStatus is the UNAVAILABLE answer of an Attach to a daemon that is
// draining or stopping, with a PublishConflict detail (REASON_BUSY and the
// state) so that clients can tell it from other UNAVAILABLE errors: a
// draining daemon is empty or serving again once its leases are gone.
func busyStatus(deviceUUID string, st State) error {
	s := status.New(codes.Unavailable, fmt.Sprintf("daemon of %s is %s and accepts no new lease", deviceUUID, st))
	withDetail, err := s.WithDetails(conflictToProto(&PublishConflictError{Reason: ConflictBusy, State: st}))
	if err != nil {
		return s.Err()
	}
	return withDetail.Err()
}

// conflictStatus converts a *PublishConflictError into its status with a
// PublishConflict detail; other errors become INTERNAL.
func conflictStatus(err error) error {
	var ce *PublishConflictError
	if !errors.As(err, &ce) {
		return status.Error(codes.Internal, err.Error())
	}
	code := codes.FailedPrecondition
	if ce.Reason == ConflictInProgress {
		code = codes.Aborted
	}
	s := status.New(code, err.Error())
	withDetail, derr := s.WithDetails(conflictToProto(ce))
	if derr != nil {
		return s.Err()
	}
	return withDetail.Err()
}
