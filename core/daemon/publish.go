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
	"github.com/wcache/wcache/core/daemon/registry"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/internal/defaults"
	"github.com/wcache/wcache/internal/memfdseal"
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
	in := d.publishStream(ctx, stream)
	defer in.deadline.Stop()
	begin, err := in.begin()
	if err != nil {
		return err
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
	pub, g, err := d.reg.BeginPublish(procOf(p), name, cfg, registry.CompareFor(true, len(begin.GetFiles()), cfg.EngineName), time.Now())
	if err != nil {
		return conflictStatus(err)
	}
	d.log.Info("publish begins", "pid", p.PID, "uid", p.UID, "client", name, "generation", g.ID, "config_digest", g.Digest)
	tx := &publishTx{d: d, p: p, pub: pub, g: g}
	defer tx.abortUnlessCommitted()
	if err := checkMetadata(begin.GetMetadata()); err != nil {
		return err
	}
	specs, err := in.tensorTable(begin, pub)
	if err != nil {
		return err
	}
	pl, err := d.planPublish(specs)
	if err != nil {
		return err
	}
	begun := time.Now()
	reserved, err := d.allocatePublish(ctx, pl, g, &tx.ids)
	if err != nil {
		return err
	}
	if err := tx.sendPlan(ctx, stream, begin, pl, specs); err != nil {
		return err
	}
	commit, err := in.commit(pub)
	if err != nil {
		return err
	}
	verified, err := tx.checkCommit(ctx, pl, commit)
	if err != nil {
		return err
	}
	stats := LoadStats{Bytes: pl.Bytes, AllocatedBytes: reserved, Allocations: len(pl.Allocations),
		Duration: time.Since(begun)}
	if err := d.install(pub, tx.ids, tx.m, stats); err != nil {
		return err
	}
	tx.committed = true
	d.metrics.Loaded(stats, len(pl.Tensors))
	d.log.Info("published", "pid", p.PID, "generation", g.ID, "tensors", len(pl.Tensors), "bytes", pl.Bytes,
		"allocations", len(tx.ids), "verified", verified, "config_digest", tx.m.digest)
	return stream.Send(tx.m.publishDone(pl.Bytes, verified))
}

// publishMsgs is a publisher's stream of messages, bounded by
// Options.PublishTimeout from its start.
type publishMsgs struct {
	d        *Daemon
	ctx      context.Context
	msgs     <-chan received
	deadline *time.Timer
}

// publishStream starts receiving stream's messages; the caller stops
// deadline.
func (d *Daemon) publishStream(ctx context.Context, stream daemonv1.Daemon_PublishServer) *publishMsgs {
	return &publishMsgs{d: d, ctx: ctx, msgs: receiveAll(ctx, stream), deadline: time.NewTimer(d.opts.PublishTimeout)}
}

// next is the publisher's next message, or why there is none: the
// stream's error, the publish timeout, the daemon stopping (pub's end; pub
// nil before it began) or the client gone.
func (in *publishMsgs) next(pub *publisher) (*daemonv1.PublishRequest, error) {
	var ended <-chan struct{}
	if pub != nil {
		ended = pub.Ended
	}
	select {
	case r := <-in.msgs:
		if r.err != nil {
			return nil, r.err
		}
		return r.req, nil
	case <-in.deadline.C:
		return nil, status.Errorf(codes.DeadlineExceeded, "publish did not commit within %s", in.d.opts.PublishTimeout)
	case <-ended:
		return nil, status.Errorf(codes.Unavailable, "daemon of %s is stopping: publish aborted", in.d.info.DeviceUUID)
	case <-in.ctx.Done():
		return nil, status.FromContextError(in.ctx.Err()).Err()
	}
}

// begin is the publisher's first message: a begin with a config and a
// tensor count within bounds.
func (in *publishMsgs) begin() (*daemonv1.PublishBegin, error) {
	first, err := in.next(nil)
	if err != nil {
		return nil, err
	}
	begin := first.GetBegin()
	switch {
	case begin == nil:
		return nil, status.Error(codes.InvalidArgument, "publish: the first message must be begin")
	case begin.GetConfig() == nil:
		return nil, status.Error(codes.InvalidArgument, "publish: begin carries no config")
	case begin.GetTensorCount() == 0 || begin.GetTensorCount() > maxPublishTensors:
		return nil, status.Errorf(codes.InvalidArgument, "publish: tensor_count %d: want 1 to %d", begin.GetTensorCount(), maxPublishTensors)
	}
	return begin, nil
}

// tensorTable is the whole tensor table: begin's entries and those of the
// tensors messages that follow, within the table budget, exactly
// tensor_count of them.
func (in *publishMsgs) tensorTable(begin *daemonv1.PublishBegin, pub *publisher) ([]*daemonv1.TensorSpec, error) {
	var budget tableBudget
	specs := begin.GetTensors()
	if err := budget.add(specs); err != nil {
		return nil, err
	}
	for uint32(len(specs)) < begin.GetTensorCount() {
		req, err := in.next(pub)
		if err != nil {
			return nil, err
		}
		more := req.GetTensors()
		if more == nil {
			return nil, status.Errorf(codes.InvalidArgument, "publish: %d of %d table entries received, then a message that is not tensors",
				len(specs), begin.GetTensorCount())
		}
		if err := budget.add(more.GetTensors()); err != nil {
			return nil, err
		}
		specs = append(specs, more.GetTensors()...)
	}
	if uint32(len(specs)) != begin.GetTensorCount() {
		return nil, status.Errorf(codes.InvalidArgument, "publish: tensor_count is %d, the table has %d entries", begin.GetTensorCount(), len(specs))
	}
	return specs, nil
}

// commit is the publisher's message after the plan, which must be commit.
func (in *publishMsgs) commit(pub *publisher) (*daemonv1.PublishCommit, error) {
	req, err := in.next(pub)
	if err != nil {
		return nil, err
	}
	commit := req.GetCommit()
	if commit == nil {
		return nil, status.Error(codes.InvalidArgument, "publish: the message after the plan must be commit")
	}
	return commit, nil
}

// planPublish plans the tensor table (plan.BuildTable, the daemon's plan
// options): InvalidArgument for a table that does not plan, Internal for
// the daemon's own options.
func (d *Daemon) planPublish(specs []*daemonv1.TensorSpec) (*plan.Plan, error) {
	pl, err := plan.BuildTable(tableEntries(specs), d.opts.Plan)
	if err != nil {
		code := codes.InvalidArgument
		if errors.Is(err, plan.ErrInvalidOptions) {
			code = codes.Internal
		}
		return nil, status.Errorf(code, "publish: %v", err)
	}
	return pl, nil
}

// publishTx is one publish from its begin: the allocations and manifest
// it made, forgotten (abortUnlessCommitted) unless it committed.
type publishTx struct {
	d         *Daemon
	p         PeerInfo
	pub       *publisher
	g         *generation
	ids       []sdk.AllocationID
	m         *manifest
	committed bool
}

// abortUnlessCommitted frees what an uncommitted publish allocated,
// closes its manifest's descriptors and forgets its generation.
func (tx *publishTx) abortUnlessCommitted() {
	if tx.committed {
		return
	}
	d := tx.d
	d.freeAllocs(tx.ids)
	if tx.m != nil {
		tx.m.files.close()
	}
	if d.reg.AbortPublish(tx.pub) {
		d.log.Warn("publish aborted: its generation is forgotten, the others are untouched", "pid", tx.p.PID,
			"generation", tx.g.ID, "allocations_freed", len(tx.ids))
	}
	d.reportHeld()
}

// sendPlan exports the allocations, builds the generation's manifest
// (the publisher's tensor layouts, metadata and content records) and
// sends the plan: the handles to write, and for descriptor handles the
// publish's id and token to fetch them on the descriptor channel.
func (tx *publishTx) sendPlan(ctx context.Context, stream daemonv1.Daemon_PublishServer, begin *daemonv1.PublishBegin,
	pl *plan.Plan, specs []*daemonv1.TensorSpec) error {
	d, g := tx.d, tx.g
	handles, err := d.export(ctx, tx.ids)
	if err != nil {
		return backendStatus("publish", err)
	}
	m := newManifest(d.info.DeviceUUID, d.info.Backend, g.ConfigProto, g.Digest, g.ID, pl, handles)
	tx.m = m
	var publishID uint64
	var fdToken []byte
	if m.files != nil {
		d.reg.SetPublishFiles(tx.pub, m.files)
		publishID, fdToken = tx.pub.ID, tx.pub.Token[:]
	}
	for i, spec := range specs {
		m.tensors[i].Layout = spec.GetLayout()
	}
	m.metadata = begin.GetMetadata()
	m.published = true
	m.content, m.policies = begin.GetFiles(), cacheconfig.PolicyStrings(d.opts.ContentPolicies)
	return stream.Send(m.publishPlan(publishID, fdToken))
}

// checkCommit ends the publisher's write access before anything is
// checked — sealed against writes, no descriptor it holds can change a
// byte, and a writable mapping it kept refuses the commit — then verifies
// the commit's digests (verifyPublish).
func (tx *publishTx) checkCommit(ctx context.Context, pl *plan.Plan, commit *daemonv1.PublishCommit) (verified bool, err error) {
	if err := tx.d.sealWrites(tx.m, false); err != nil {
		if errors.Is(err, memfdseal.ErrWritableMapping) {
			return false, status.Errorf(codes.FailedPrecondition,
				"publish: %v: unmap every writable mapping of the plan's handles before the commit (the publisher's write access ends at the commit)", err)
		}
		return false, status.Errorf(codes.Internal, "publish: %v", err)
	}
	return tx.d.verifyPublish(ctx, pl, tx.ids, commit.GetSha256())
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
	defaults.Zero(&c.ProtocolVersion, daemonv1.ProtocolVersion)
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
	d.reg.SetAllocated(g, reserved)
	d.reportHeld()
	if err != nil {
		return 0, backendStatus("publish", err)
	}
	return reserved, nil
}

// install makes the committed publish a serving generation, unless the
// daemon began stopping under it.
func (d *Daemon) install(pub *publisher, ids []sdk.AllocationID, m *manifest, stats LoadStats) error {
	ok := d.reg.FinishPublish(pub, true, func(g *generation) {
		g.Allocs, g.Manifest, g.Load, g.Tensors = ids, m, stats, len(m.tensors)
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
