package daemon

import (
	"os"
	"runtime"
	"time"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/version"
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

// statusProto is the daemon's Status answer. It reads what the daemon
// holds under d.mu.
func (d *Daemon) statusProto() *daemonv1.StatusResponse {
	d.mu.RLock()
	defer d.mu.RUnlock()
	state, publisherPID := d.reg.stateAndPublisher()
	resp := &daemonv1.StatusResponse{
		Pid: int32(os.Getpid()), DeviceUuid: d.info.DeviceUUID, Backend: d.info.Backend, Model: d.info.Model,
		Config: d.configProto, ConfigDigest: d.info.ConfigDigest, Bytes: d.info.Load.Bytes,
		Tensors: uint32(d.info.Tensors), Generation: d.generation, StartedUnixMs: d.started.UnixMilli(),
		Version: version.Version, State: state.String(), ProtocolVersion: daemonv1.ProtocolVersion,
		Goroutines: uint32(runtime.NumGoroutine()), OpenFds: uint32(openFDs()),
		StartPhases: startPhasesToProto(d.info.Load, d.info.StartDuration, d.restarts),
		DaemonState: stateProto(state), PublisherPid: publisherPID,
		DeviceBytes: d.info.Load.AllocatedBytes, DeviceBytesTotal: d.heldBytesLocked(),
		MaxBytes: d.opts.MaxBytes, ReserveBytes: d.opts.ReserveBytes,
	}
	if d.manifest != nil {
		resp.Metadata = d.manifest.metadata
		resp.Files, resp.ContentPolicies = d.manifest.content, d.manifest.policies
		resp.FileSha256 = d.manifest.blobs.list()
	}
	for _, l := range d.leaseInfos() {
		resp.Leases = append(resp.Leases, &daemonv1.Lease{Id: l.ID, Pid: l.PID, Uid: l.UID,
			ClientName: l.ClientName, SinceUnixMs: l.Since.UnixMilli()})
	}
	return resp
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
		BytesLoaded: s.Bytes - min(s.Bytes, s.Adopted), BytesAllocated: s.AllocatedBytes,
		BytesAdopted: s.Adopted, Source: s.Source, PluginRestarts: uint32(r.count), LastRestartNs: int64(r.last)}
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
