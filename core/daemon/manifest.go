package daemon

import (
	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/internal/version"
	"github.com/wcache/wcache/sdk"
)

// manifest is the attach answer, built once at startup. Every attach sends a
// shallow copy that shares the handle and tensor messages (protobuf
// marshalling only reads them), so an attach costs its serialisation and
// nothing proportional to the tensor count beyond it.
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
		ProtocolVersion: version.ProtocolVersion,
		Metadata:        m.metadata,
	}}}
}
