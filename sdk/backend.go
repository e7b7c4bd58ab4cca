// Package sdk is the backend contract of wcache: the Backend interface a
// device backend implements, its types, typed errors that survive the gRPC
// boundary, the configuration schema, and the gRPC adapters and protobuf
// conversions on both sides of it. It does not start plugins: a backend is
// a separate binary named wcache-backend-NAME whose main calls
// sdk/plugin.Serve, and the host starts it with core/pluginhost. A host or
// an engine that only needs the contract's types links this package
// without hashicorp/go-plugin. See docs/writing-a-backend.md.
package sdk

import (
	"context"
	"os"

	"github.com/wcache/wcache/sdk/names"
)

// AllocationID names an allocation (or an imported mapping) inside one
// backend process. IDs are never reused within a process lifetime.
type AllocationID uint64

// Info describes a backend.
type Info struct {
	Name     string // e.g. "mock", "cuda"
	Version  string // the plugin's own version
	Platform string // "cuda", "rocm" or "mock"
	// HandleKinds lists the handle kinds Export produces ("cuda-ipc",
	// "hip-ipc", "posix-shm", or a vendor kind "x-VENDOR-NAME": see
	// sdk/names).
	HandleKinds []string
	// Options is the configuration schema (see Option). A backend leaves it
	// empty: the sdk fills it from Configurable.Options or the schema
	// given to sdk/plugin.WithSchema, and the host reads it here.
	Options []Option
}

// Device is one device as the plugin process sees it.
type Device struct {
	Ordinal     int
	UUID        string // vendor canonical form: "GPU-…", "MIG-…"
	Name        string
	TotalMemory uint64 // bytes
	FreeMemory  uint64 // bytes; 0 when unknown (a backend may not tell without creating a context)
	PCIBusID    string // "" when unknown
	Capability  string // "9.0", "gfx942", "mock"
}

// Extent copies Length bytes at FileOffset of Path to DestOffset of an
// allocation.
type Extent struct {
	Path       string
	FileOffset uint64
	Length     uint64
	DestOffset uint64
}

// Handle is an exported allocation that another process can map.
type Handle struct {
	Kind string // "cuda-ipc", "hip-ipc", "posix-shm", "memfd", ...
	Data []byte // kind-specific: a 64-byte cudaIpcMemHandle, a shm path, ...
	Size uint64 // bytes of the exported region
	// File is the descriptor of a descriptor handle (kinds "memfd",
	// "cuda-vmm-fd"); nil for a name handle. Across the plugin boundary it
	// travels with SCM_RIGHTS on the plugin descriptor channel (see
	// fdpass and docs/protocol.md). Ownership: a File returned by Export
	// belongs to the caller (a backend returns a fresh duplicate every
	// time); a File passed to Import is borrowed for the call (a backend
	// that keeps the memory duplicates it).
	File *os.File
}

// IsDescriptorKind reports whether a handle kind is carried as a file
// descriptor rather than a name: names.KindMemfd (a memfd sealed against
// shrinking, mapped with mmap; Data is empty) and names.KindCUDAVMMFD (a
// CUDA VMM allocation exported as a POSIX file descriptor). The memory is
// reached through the descriptor itself, which lives as long as any process
// holds it.
func IsDescriptorKind(kind string) bool {
	return kind == names.KindMemfd || kind == names.KindCUDAVMMFD
}

// Range is a byte range of an allocation.
type Range struct {
	Offset uint64
	Length uint64
}

// ProgressFunc receives load progress. It may be nil. Implementations call it
// from the goroutine running Load, at most every few MiB.
type ProgressFunc func(done, total uint64)

// MaxReadBytes bounds one Read call so that a reply fits a gRPC message.
const MaxReadBytes = 16 << 20

// Backend is the contract every device backend implements. All methods must
// be safe for concurrent use. Errors should wrap one of the sentinel errors
// in errors.go (ErrNoSuchDevice, ErrOutOfMemory, …) so that callers across
// the plugin boundary can branch on them with errors.Is.
type Backend interface {
	// Info describes the backend.
	Info(ctx context.Context) (Info, error)
	// Devices lists the devices visible to this process, by ordinal.
	Devices(ctx context.Context) ([]Device, error)
	// DeviceUUID maps an ordinal as this process sees it (after
	// CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, …) to the canonical UUID.
	// An unknown ordinal is ErrNoSuchDevice.
	DeviceUUID(ctx context.Context, ordinal int) (string, error)
	// Allocate reserves bytes of device memory on the device and returns its
	// id and the bytes actually reserved (>= bytes). Lack of memory is
	// ErrOutOfMemory and leaves the backend usable.
	Allocate(ctx context.Context, ordinal int, bytes uint64) (AllocationID, uint64, error)
	// Load copies every extent from its file into the allocation. Extents
	// must lie inside the allocation (ErrInvalidArgument otherwise). The
	// backend reads the files itself; weights never cross the plugin
	// boundary.
	Load(ctx context.Context, id AllocationID, extents []Extent, progress ProgressFunc) error
	// Export returns a handle to the whole allocation that another process
	// can map. It synchronises outstanding copies first.
	Export(ctx context.Context, id AllocationID) (Handle, error)
	// Import maps a handle (exported by this or another process) and returns
	// an id for Read, Digest and Free.
	Import(ctx context.Context, ordinal int, h Handle) (AllocationID, error)
	// Read copies [offset, offset+length) back to the host. length is at
	// most MaxReadBytes; a range past the end is ErrInvalidArgument.
	Read(ctx context.Context, id AllocationID, offset, length uint64) ([]byte, error)
	// Digest returns the SHA-256 of each range, in order.
	Digest(ctx context.Context, id AllocationID, ranges []Range) ([][32]byte, error)
	// Free releases an allocation or unmaps an imported one. Freeing an
	// unknown or already freed id is ErrNoSuchAllocation.
	Free(ctx context.Context, id AllocationID) error
}
