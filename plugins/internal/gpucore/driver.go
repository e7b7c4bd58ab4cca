// Package gpucore is the vendor-neutral core of a GPU backend: the table
// of allocation ids, the registry of device memory with its references,
// the cache of exported and imported IPC handles, one worker thread per
// device, and the sdk.Backend methods built on them (Allocate, Load,
// Export, Import, Read, Digest, Free), over a Driver that makes the vendor
// calls. The CUDA and ROCm backends are a Driver each plus their device
// enumeration and Info; everything else they share here.
//
// Both vendors' legacy IPC handles are 64 opaque bytes of an allocation
// base (cuIpcGetMemHandle, hipIpcGetMemHandle), opened by another process
// (never the exporting one) once per device, reference counted. A Driver
// that also implements FDDriver (CUDA: VMM memory exported as POSIX file
// descriptors) hands out descriptor handles instead (see descriptor.go).
package gpucore

import (
	"os"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/fill"
)

// Ptr is a device address.
type Ptr uint64

// descriptors returns the Driver as an FDDriver when the handles it
// exports are descriptors, nil when they are legacy IPC handles.
func descriptors(drv Driver) FDDriver {
	if fd, ok := drv.(FDDriver); ok && sdk.IsDescriptorKind(fd.DescriptorKind()) && drv.HandleKind() == fd.DescriptorKind() {
		return fd
	}
	return nil
}

// importsFD returns the Driver as an FDDriver when kind is its descriptor
// kind, nil otherwise.
func importsFD(drv Driver, kind string) FDDriver {
	if fd, ok := drv.(FDDriver); ok && kind == fd.DescriptorKind() {
		return fd
	}
	return nil
}

// HandleSize is the size of an IPC handle.
const HandleSize = 64

// Handle is an IPC handle's bytes.
type Handle [HandleSize]byte

// Driver is the vendor half of a backend. Methods marked "thread" run on
// the device's worker thread (see Worker), after Setup ran there.
type Driver interface {
	// Name names the vendor in messages: "CUDA", "ROCm".
	Name() string
	// HandleKind is the sdk handle kind Export produces and Import accepts.
	HandleKind() string
	// DeviceCount is the number of devices this process sees.
	DeviceCount() int
	// Fatal returns the first error after which the process cannot use
	// the GPU again (CUDA's sticky errors, HIP's fatal ones), nil if none.
	Fatal() error
	// FillOptions are the sdk/fill options of every Load.
	FillOptions() fill.Options

	// Setup (thread) makes device ordinal current on the calling thread
	// and returns the worker's vendor state (a retained context, or nil).
	Setup(ordinal int) (state any, err error)
	// Cleanup (thread) releases what Setup and the worker's lanes hold.
	Cleanup(w *Worker) error
	// Malloc and Free (thread) allocate and free device memory.
	Malloc(n uint64) (Ptr, error)
	Free(p Ptr) error
	// Synchronize (thread) waits for every copy to the device.
	Synchronize() error
	// IpcGet (thread) exports the allocation at base p.
	IpcGet(p Ptr) (Handle, error)
	// IpcOpen and IpcClose (thread) map and unmap another process's
	// allocation.
	IpcOpen(h Handle) (Ptr, error)
	IpcClose(p Ptr) error
	// MappedBytes (thread) returns how many bytes are mapped from p to the
	// end of its allocation, 0 when the driver cannot tell.
	MappedBytes(p Ptr) uint64
	// MemcpyDtoH (thread) copies device memory to the host.
	MemcpyDtoH(dst []byte, src Ptr) error
	// MemGetInfo (thread) returns the device's free bytes.
	MemGetInfo() (free uint64, err error)
	// OpenFailure classifies a failed IpcOpen: whether err is the
	// driver's own (a result code), and whether that code is the driver's
	// invalid-context error (an open in the exporting process, or from
	// another PID namespace).
	OpenFailure(err error) (driverError, invalidContext bool)
	// Copier returns the fill copier into the allocation at base on w's
	// device.
	Copier(w *Worker, base Ptr) fill.Copier
}

// FDDriver is a Driver whose handles can be descriptors (Handle.File): a
// physical allocation exported as a file descriptor, such as CUDA VMM
// memory with POSIX descriptor handles. The Backend imports handles of
// DescriptorKind with ImportFD whatever HandleKind is (so that a plugin
// started with the defaults, `attach --verify`'s, maps a daemon's
// descriptors). When HandleKind is DescriptorKind it also allocates with
// CreateFD instead of Malloc; descriptor memory exports with ExportFD
// instead of IpcGet. Free releases both created and imported descriptor
// memory (the driver knows which base is which).
type FDDriver interface {
	// DescriptorKind is the descriptor handle kind (sdk.IsDescriptorKind).
	DescriptorKind() string
	// CreateFD (thread) allocates at least n bytes of exportable device
	// memory on device ordinal, mapped read-write at the returned base.
	CreateFD(ordinal int, n uint64) (Ptr, error)
	// ExportFD (thread) returns a new descriptor (owned by the caller) of
	// the memory at base p, made by CreateFD or ImportFD.
	ExportFD(p Ptr) (*os.File, error)
	// ImportFD (thread) maps size bytes of the memory a descriptor names
	// on device ordinal, READ-ONLY (CUDA: cuMemSetAccess with
	// CU_MEM_ACCESS_FLAGS_PROT_READ), and returns the base: an import is
	// read (Read, Digest, a peer copy's source) and exported again,
	// never written through. f stays the caller's. Memory smaller than
	// size, or a descriptor the driver cannot use, is a driver error.
	ImportFD(ordinal int, f *os.File, size uint64) (Ptr, error)
}

// MappedFrom is how many bytes of the mapping [base, base+n) lie from p on
// (Driver.MappedBytes from a driver's address-range lookup): 0 when the
// lookup failed (err) or p lies below base.
func MappedFrom(p, base Ptr, n uint64, err error) uint64 {
	if err != nil || base > p {
		return 0
	}
	return n - uint64(p-base)
}
