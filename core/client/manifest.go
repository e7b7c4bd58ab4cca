package client

import (
	"fmt"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
)

// Handle is an exported allocation of the daemon: kind-specific bytes a
// client maps ("posix-shm": a file path; "cuda-ipc": a cudaIpcMemHandle).
type Handle struct {
	Kind string
	Data []byte
	Size uint64
}

// Tensor says where one tensor lives: bytes [Offset, Offset+Length) of
// Handles[Handle].
type Tensor struct {
	Name   string
	DType  string // safetensors spelling: "BF16", "F32", ...
	Shape  []uint64
	Handle int
	Offset uint64
	Length uint64
}

// Manifest is what a daemon holds, as sent on attach.
type Manifest struct {
	DeviceUUID      string
	Backend         string
	Config          cacheconfig.Config
	ConfigDigest    string
	Generation      uint64
	Handles         []Handle
	Tensors         []Tensor
	LeaseID         uint64
	ProtocolVersion uint32
}

// Bytes is the sum of every tensor's length.
func (m *Manifest) Bytes() uint64 {
	var n uint64
	for _, t := range m.Tensors {
		n += t.Length
	}
	return n
}

// manifestFromProto converts and checks a wire manifest: every tensor must
// name an existing handle and lie inside it.
func manifestFromProto(pm *daemonv1.Manifest) (*Manifest, error) {
	m := &Manifest{
		DeviceUUID: pm.GetDeviceUuid(), Backend: pm.GetBackend(), ConfigDigest: pm.GetConfigDigest(),
		Generation: pm.GetGeneration(), LeaseID: pm.GetLeaseId(), ProtocolVersion: pm.GetProtocolVersion(),
		Handles: make([]Handle, len(pm.GetHandles())), Tensors: make([]Tensor, len(pm.GetTensors())),
	}
	if pm.GetConfig() != nil {
		m.Config = cacheconfig.FromProto(pm.GetConfig())
	}
	for i, h := range pm.GetHandles() {
		m.Handles[i] = Handle{Kind: h.GetKind(), Data: h.GetData(), Size: h.GetSize()}
	}
	for i, t := range pm.GetTensors() {
		hi := int(t.GetHandleIndex())
		if hi >= len(m.Handles) {
			return nil, fmt.Errorf("tensor %q names handle %d of %d: %w", t.GetName(), hi, len(m.Handles), ErrBadManifest)
		}
		size := m.Handles[hi].Size
		if t.GetOffset() > size || t.GetLength() > size-t.GetOffset() {
			return nil, fmt.Errorf("tensor %q [%d, +%d) lies outside handle %d of %d bytes: %w",
				t.GetName(), t.GetOffset(), t.GetLength(), hi, size, ErrBadManifest)
		}
		m.Tensors[i] = Tensor{Name: t.GetName(), DType: t.GetDtype(), Shape: t.GetShape(), Handle: hi,
			Offset: t.GetOffset(), Length: t.GetLength()}
	}
	return m, nil
}
