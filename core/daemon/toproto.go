package daemon

import (
	"os"
	"runtime"
	"time"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/internal/version"
	"github.com/wcache/wcache/sdk"
)

// This file holds every domain → daemon.v1 conversion of the daemon; the
// client's daemon.v1 → domain conversions are in core/client/fromproto.go.

// manifest is the attach answer, built once per generation (at startup, or
// by a Publish). Its wire form is marshalled once, on the first attach, and
// shared by every lease (wire.go): an attach costs nothing proportional to
// the tensor count on the daemon's side. A manifest is used by pointer only.
type manifest struct {
	deviceUUID string
	backend    string
	config     *configv1.CacheConfig
	digest     string
	generation uint64
	handles    []*daemonv1.Handle
	tensors    []*daemonv1.Tensor
	// metadata is a publish's metadata map (nil for file loads).
	metadata map[string]string
	// published: an engine published these weights (attaches are compared
	// with cacheconfig.ComparePublished), not a file load.
	published bool
	// content is the content of the source files (sorted by name) and
	// policies the content policies the daemon's clients may use.
	content  []*daemonv1.FileContent
	policies []string
	// blobs are the hub blob names verified after the load (hubblob.go).
	blobs blobSums
	// files holds the descriptors of the descriptor handles (index = handle
	// index, nil for a name handle); see descriptors.go. nil when no
	// handle is a descriptor.
	files *handleFiles

	// wire holds the marshalled manifest without a lease id (encoded):
	// [0] with Manifest.tensors, [1] with a TensorTable.
	wire [2]wireForm
}

// newManifest converts a plan and the exported handles (one per
// allocation, in order) into the wire manifest.
func newManifest(deviceUUID, backend string, cfg *configv1.CacheConfig, digest string, generation uint64,
	p *plan.Plan, handles []sdk.Handle) *manifest {
	m := &manifest{deviceUUID: deviceUUID, backend: backend, config: cfg, digest: digest, generation: generation,
		handles: make([]*daemonv1.Handle, len(handles)),
		tensors: make([]*daemonv1.Tensor, len(p.Tensors)),
	}
	for i, h := range handles {
		m.handles[i] = &daemonv1.Handle{Kind: h.Kind, Data: h.Data, Size: h.Size}
	}
	m.files = newHandleFiles(handles)
	// One backing array for every tensor message: one allocation instead
	// of one per tensor.
	backing := make([]daemonv1.Tensor, len(p.Tensors))
	for i, t := range p.Tensors {
		backing[i].Name = t.Name
		backing[i].Dtype = t.DType
		backing[i].Shape = t.Shape
		backing[i].HandleIndex = t.Handle
		backing[i].Offset = t.Offset
		backing[i].Length = t.Length
		m.tensors[i] = &backing[i]
	}
	return m
}

// forLease is the manifest message of one lease (without its fd_token,
// which leaseEvent adds).
func (m *manifest) forLease(leaseID uint64) *daemonv1.AttachEvent {
	return &daemonv1.AttachEvent{Event: &daemonv1.AttachEvent_Manifest{Manifest: &daemonv1.Manifest{
		DeviceUuid:      m.deviceUUID,
		Backend:         m.backend,
		Config:          m.config,
		ConfigDigest:    m.digest,
		Generation:      m.generation,
		Handles:         m.handles,
		Tensors:         m.tensors,
		LeaseId:         leaseID,
		ProtocolVersion: daemonv1.ProtocolVersion,
		Metadata:        m.metadata,
		Files:           m.content,
		ContentPolicies: m.policies,
		FileSha256:      m.blobs.list(),
	}}}
}

// tensorLayoutToProto converts a published tensor's view (nil stays nil).
func tensorLayoutToProto(l *client.Layout) *daemonv1.TensorLayout {
	if l == nil {
		return nil
	}
	return &daemonv1.TensorLayout{Storage: l.Storage, Strides: l.Strides, StorageOffset: l.StorageOffset}
}

// statusProto is the daemon's Status answer: every generation, and the
// single-generation fields of its primary one (the oldest serving one).
func (d *Daemon) statusProto() *daemonv1.StatusResponse {
	d.mu.RLock()
	info, restarts := d.info, d.restarts
	d.mu.RUnlock()
	var resp *daemonv1.StatusResponse
	d.reg.Status(func(v statusView) { resp = d.statusOf(v, info, restarts) })
	// Counted outside the registry's lock: reading /proc/self/fd is a
	// directory walk that attaches need not wait for.
	resp.Goroutines, resp.OpenFds = uint32(runtime.NumGoroutine()), uint32(openFDs())
	return resp
}

// statusOf is the Status answer of v (under the registry's lock).
func (d *Daemon) statusOf(v statusView, info Info, restarts restartStats) *daemonv1.StatusResponse {
	state := v.State
	resp := &daemonv1.StatusResponse{
		Pid: int32(os.Getpid()), DeviceUuid: info.DeviceUUID, Backend: info.Backend,
		StartedUnixMs: d.started.UnixMilli(),
		Version:       version.Version, State: state.String(), ProtocolVersion: daemonv1.ProtocolVersion,
		DaemonState:      stateProto(state),
		DeviceBytesTotal: v.Held,
		MaxBytes:         d.opts.MaxBytes, ReserveBytes: d.opts.ReserveBytes,
		Config: d.emptyConfigProto(),
	}
	var load LoadStats
	if g := v.Primary; g != nil {
		if g.State == StatePublishing {
			resp.PublisherPid = g.Publisher.Peer.PID
		} else {
			resp.Model, resp.Config, resp.ConfigDigest = g.Model, g.ConfigProto, g.Digest
			resp.Bytes, resp.Tensors, resp.Generation = g.Load.Bytes, uint32(g.Tensors), g.ID
			resp.DeviceBytes, load = g.Load.AllocatedBytes, g.Load
			resp.FilledFrom, resp.FillFallback = g.Load.FilledFrom, g.Load.FillFallback
			if g.Manifest != nil {
				resp.Metadata = g.Manifest.metadata
				resp.Files, resp.ContentPolicies = g.Manifest.content, g.Manifest.policies
				resp.FileSha256 = g.Manifest.blobs.list()
			}
		}
	}
	if resp.Generation == 0 {
		// Nothing serves: why a peer fill of an attach failed, if one did.
		resp.FillFallback = v.AttachFallback
	}
	resp.StartPhases = startPhasesToProto(load, info.StartDuration, restarts)
	for _, l := range v.Leases {
		resp.Leases = append(resp.Leases, leaseToProto(l))
	}
	for _, g := range v.Gens {
		gs := &daemonv1.GenerationStatus{Generation: g.ID, State: stateProto(g.State), Model: g.Model,
			Config: g.ConfigProto, ConfigDigest: g.Digest, Bytes: g.Load.Bytes, Tensors: uint32(g.Tensors),
			DeviceBytes: g.DeviceBytes(), Source: g.Load.Source, StartedUnixMs: g.Started.UnixMilli(),
			FilledFrom: g.Load.FilledFrom, FillFallback: g.Load.FillFallback}
		if g.Publisher != nil {
			gs.PublisherPid = g.Publisher.Peer.PID
		}
		if g.Manifest != nil {
			gs.Metadata, gs.Files = g.Manifest.metadata, g.Manifest.content
			gs.FileSha256 = g.Manifest.blobs.list()
		}
		for _, l := range v.LeasesOf(g) {
			gs.Leases = append(gs.Leases, leaseToProto(l))
		}
		resp.Generations = append(resp.Generations, gs)
	}
	return resp
}

// leaseToProto is l as Status reports it.
func leaseToProto(l *lease) *daemonv1.Lease {
	return &daemonv1.Lease{Id: l.ID, Pid: l.Peer.PID, Uid: l.Peer.UID, ClientName: l.ClientName,
		SinceUnixMs: l.Since.UnixMilli(), Generation: l.Gen.ID}
}

// drainNotice is the notice every lease gets when a drain begins.
func drainNotice(deadline time.Time, message string) *daemonv1.Notice {
	return &daemonv1.Notice{Kind: daemonv1.Notice_KIND_DRAINING, DeadlineUnixMs: deadline.UnixMilli(), Message: message}
}

// startPhasesToProto reports the start-up's phases and bytes; total is
// Info.StartDuration.
func startPhasesToProto(s LoadStats, total time.Duration, r restartStats) *daemonv1.StartPhases {
	return &daemonv1.StartPhases{PlanNs: int64(s.Plan), LockNs: int64(s.Lock), AllocateNs: int64(s.Allocate),
		LoadNs: int64(s.Duration), ExportNs: int64(s.Export), TotalNs: int64(total),
		BytesLoaded: s.Bytes - min(s.Bytes, s.Adopted+s.FromPeer), BytesAllocated: s.AllocatedBytes,
		BytesAdopted: s.Adopted, Source: s.Source, PluginRestarts: uint32(r.count), LastRestartNs: int64(r.last),
		BytesFromPeer: s.FromPeer, PeerVerifyNs: int64(s.PeerVerify)}
}

// publishPlan is the answer to a publish's table: m's writable handles and
// places; publishID and fdToken (nil for name handles) let the publisher
// fetch the writable descriptors on the descriptor channel.
func (m *manifest) publishPlan(publishID uint64, fdToken []byte) *daemonv1.PublishResponse {
	return &daemonv1.PublishResponse{Msg: &daemonv1.PublishResponse_Plan{Plan: &daemonv1.PublishPlan{
		Handles: m.handles, Tensors: m.tensors, Generation: m.generation, DeviceUuid: m.deviceUUID,
		PublishId: publishID, FdToken: fdToken}}}
}

// publishDone is the answer to a publish's commit.
func (m *manifest) publishDone(bytes uint64, verified bool) *daemonv1.PublishResponse {
	return &daemonv1.PublishResponse{Msg: &daemonv1.PublishResponse_Done{Done: &daemonv1.PublishDone{
		Generation: m.generation, ConfigDigest: m.digest, Bytes: bytes, Tensors: uint32(len(m.tensors)),
		Verified: verified}}}
}

// mismatchToProto is the ConfigMismatch detail of the kept diffs.
func mismatchToProto(kept []cacheconfig.FieldDiff, omitted int) *daemonv1.ConfigMismatch {
	detail := &daemonv1.ConfigMismatch{Omitted: uint32(omitted)}
	for _, df := range kept {
		detail.Diffs = append(detail.Diffs, &daemonv1.FieldDiff{Field: df.Field, DaemonValue: df.Daemon, ClientValue: df.Client,
			DaemonAbsent: df.DaemonAbsent, ClientAbsent: df.ClientAbsent, Truncated: df.Truncated})
	}
	return detail
}

// noWeightsToProto is the NoWeights detail of an empty or publishing daemon.
func noWeightsToProto(st State, publisherPID int32) *daemonv1.NoWeights {
	return &daemonv1.NoWeights{State: stateProto(st), PublisherPid: publisherPID}
}

// conflictToProto is the PublishConflict detail of ce.
func conflictToProto(ce *PublishConflictError) *daemonv1.PublishConflict {
	reason := daemonv1.PublishConflict_REASON_BUSY
	switch ce.Reason {
	case ConflictInProgress:
		reason = daemonv1.PublishConflict_REASON_IN_PROGRESS
	case ConflictHoldsWeights:
		reason = daemonv1.PublishConflict_REASON_HOLDS_WEIGHTS
	}
	return &daemonv1.PublishConflict{Reason: reason, PublisherPid: ce.PublisherPID, ConfigDigest: ce.ConfigDigest,
		State: stateProto(ce.State)}
}

// stateProto is s as the wire enum.
func stateProto(s State) daemonv1.DaemonState {
	switch s {
	case StateEmpty:
		return daemonv1.DaemonState_DAEMON_STATE_EMPTY
	case StatePublishing:
		return daemonv1.DaemonState_DAEMON_STATE_PUBLISHING
	case StateServing:
		return daemonv1.DaemonState_DAEMON_STATE_SERVING
	case StateDraining:
		return daemonv1.DaemonState_DAEMON_STATE_DRAINING
	default:
		return daemonv1.DaemonState_DAEMON_STATE_STOPPING
	}
}
