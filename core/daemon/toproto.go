package daemon

import (
	"os"
	"runtime"
	"time"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/version"
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

// forLease is the manifest message of one lease.
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
		StartPhases: startPhasesToProto(d.info.Load, d.info.StartDuration),
		DaemonState: stateProto(state), PublisherPid: publisherPID,
	}
	if d.manifest != nil {
		resp.Metadata = d.manifest.metadata
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
func startPhasesToProto(s LoadStats, total time.Duration) *daemonv1.StartPhases {
	return &daemonv1.StartPhases{PlanNs: int64(s.Plan), LockNs: int64(s.Lock), AllocateNs: int64(s.Allocate),
		LoadNs: int64(s.Duration), ExportNs: int64(s.Export), TotalNs: int64(total),
		BytesLoaded: s.Bytes, BytesAllocated: s.AllocatedBytes}
}
