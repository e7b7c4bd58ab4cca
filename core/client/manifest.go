package client

import (
	"os"

	"github.com/wcache/wcache/sdk/names"

	"github.com/wcache/wcache/core/cacheconfig"
)

// Handle is an exported allocation of the daemon: kind-specific bytes a
// client maps ("posix-shm": a file path; "cuda-ipc": a cudaIpcMemHandle),
// or a descriptor ("memfd", "cuda-vmm-fd").
type Handle struct {
	Kind string
	Data []byte
	Size uint64
	// File is the descriptor of a descriptor handle, received on the
	// daemon's descriptor channel by Attach (read-only for a memfd) or by
	// Publish (writable); nil for a name handle. It belongs to the lease
	// (closed by Lease.Close) or to the publish; a mapping made from it
	// stays valid after it is closed.
	File *os.File
}

// IsDescriptor reports whether the handle's kind is passed as a
// descriptor: names.KindMemfd (a Go process maps it: Map, MapFile) or
// names.KindCUDAVMMFD (needs the CUDA driver to map).
func (h Handle) IsDescriptor() bool {
	return h.Kind == names.KindMemfd || h.Kind == names.KindCUDAVMMFD
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
	// Layout is how a published tensor views its bytes; nil for weights
	// loaded from files and tensors published without one (row-major
	// contiguous at Offset).
	Layout *Layout
}

// Layout is a published tensor's view of its storage. Tensors with the
// same non-empty Storage share one byte range (same Handle, Offset and
// Length: the storage's bytes); Strides (in elements, empty: row-major) and
// StorageOffset (in elements) say how the tensor views it.
type Layout struct {
	Storage       string
	Strides       []int64
	StorageOffset uint64
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
	// FDToken is the lease's descriptor channel secret (empty when no
	// handle is a descriptor).
	FDToken []byte
	// Metadata is the metadata map of published weights (nil for file
	// loads).
	Metadata map[string]string
	// Files is the content of the files the weights came from (digest and
	// identity, sorted by name); ContentPolicies the content policies the
	// daemon lets its clients use (nil: cacheconfig.DefaultDaemonPolicies).
	// ProveContent checks a client's files against them.
	Files           []cacheconfig.FileContent
	ContentPolicies []cacheconfig.Policy
}

// Bytes is the sum of every tensor's length.
func (m *Manifest) Bytes() uint64 {
	var n uint64
	for _, t := range m.Tensors {
		n += t.Length
	}
	return n
}
