package driver

// #include "trampolines.h"
import "C"

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/plugins/internal/dl"
)

// MemHandle is a CUmemGenericAllocationHandle: a physical allocation made
// by MemCreate or MemImportFD, mapped with MemMap, freed by MemRelease
// (after its last mapping is gone).
type MemHandle uint64

// Access flags of MemSetAccess (CUmemAccess_flags).
const (
	MemAccessRead      uint32 = 1
	MemAccessReadWrite uint32 = 3
)

// Granularity options of MemGetAllocationGranularity.
const (
	GranularityMinimum     = 0 // CU_MEM_ALLOC_GRANULARITY_MINIMUM
	GranularityRecommended = 1 // CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
)

// handleTypePosixFD is CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.
const handleTypePosixFD = 1

// HasVMM reports whether the driver has every virtual memory management
// entry point (cuMemCreate … cuMemRelease, CUDA 10.2+). Without them each
// VMM method fails with ErrorNotSupported.
func (d *Driver) HasVMM() bool { return dl.Resolved(d.fn[symMemCreate : symMemRelease+1]) }

// vmmCheck fails with CUDA_ERROR_NOT_SUPPORTED when s is missing.
func (d *Driver) vmmCheck(s symbol) error {
	if d.fn[s] != nil {
		return nil
	}
	return &Error{Func: s.String(), Code: ErrorNotSupported, Name: "CUDA_ERROR_NOT_SUPPORTED", Desc: "the driver has no " + s.String()}
}

// MemGetAllocationGranularity returns the granularity (option
// GranularityMinimum or GranularityRecommended) of pinned device memory on
// device ordinal exportable as a POSIX descriptor: every MemCreate size and
// every MemAddressReserve and MemMap size is a multiple of the minimum.
func (d *Driver) MemGetAllocationGranularity(device Device, option int) (uint64, error) {
	if err := d.vmmCheck(symMemGetAllocationGranularity); err != nil {
		return 0, err
	}
	var g C.size_t
	if err := d.check(symMemGetAllocationGranularity, C.wc_mem_get_granularity(d.fn[symMemGetAllocationGranularity], &g, handleTypePosixFD, C.int(device), C.int(option))); err != nil {
		return 0, err
	}
	return uint64(g), nil
}

// MemCreate makes a physical allocation of n bytes (a multiple of the
// minimum granularity) of pinned memory on device, exportable as a POSIX
// file descriptor (cuMemCreate with requestedHandleTypes =
// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR). It is not addressable until
// mapped (MemAddressReserve, MemMap, MemSetAccess).
func (d *Driver) MemCreate(device Device, n uint64) (MemHandle, error) {
	if err := d.vmmCheck(symMemCreate); err != nil {
		return 0, err
	}
	var h C.CUmemGenericAllocationHandle
	if err := d.check(symMemCreate, C.wc_mem_create(d.fn[symMemCreate], &h, C.size_t(n), handleTypePosixFD, C.int(device))); err != nil {
		return 0, err
	}
	return MemHandle(h), nil
}

// MemExportFD exports a physical allocation as a new file descriptor
// (cuMemExportToShareableHandle, POSIX_FILE_DESCRIPTOR), returned as a
// close-on-exec *os.File the caller owns. The allocation lives while any
// process holds such a descriptor, a handle or a mapping of it.
func (d *Driver) MemExportFD(h MemHandle) (*os.File, error) {
	if err := d.vmmCheck(symMemExportToShareableHandle); err != nil {
		return nil, err
	}
	var fd C.int = -1
	if err := d.check(symMemExportToShareableHandle, C.wc_mem_export_fd(d.fn[symMemExportToShareableHandle], &fd, C.CUmemGenericAllocationHandle(h))); err != nil {
		return nil, err
	}
	if fd < 0 {
		return nil, fmt.Errorf("cuMemExportToShareableHandle: descriptor %d", int(fd))
	}
	unix.CloseOnExec(int(fd))
	return os.NewFile(uintptr(fd), "cuda-vmm-fd"), nil
}

// MemImportFD imports the physical allocation a descriptor exported by
// MemExportFD (in this or another process) names
// (cuMemImportFromShareableHandle). f stays the caller's: the handle does
// not depend on it once made. A descriptor the driver cannot use is
// CUDA_ERROR_INVALID_VALUE (or NOT_SUPPORTED).
func (d *Driver) MemImportFD(f *os.File) (MemHandle, error) {
	if err := d.vmmCheck(symMemImportFromShareableHandle); err != nil {
		return 0, err
	}
	var h C.CUmemGenericAllocationHandle
	r := C.wc_mem_import_fd(d.fn[symMemImportFromShareableHandle], &h, C.int(f.Fd()))
	if err := d.check(symMemImportFromShareableHandle, r); err != nil {
		return 0, err
	}
	return MemHandle(h), nil
}

// MemAddressReserve reserves n bytes (a multiple of the granularity) of
// device address space, aligned to align (0: the granularity).
func (d *Driver) MemAddressReserve(n, align uint64) (DevicePtr, error) {
	if err := d.vmmCheck(symMemAddressReserve); err != nil {
		return 0, err
	}
	var p C.CUdeviceptr
	if err := d.check(symMemAddressReserve, C.wc_mem_address_reserve(d.fn[symMemAddressReserve], &p, C.size_t(n), C.size_t(align))); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

// MemMap maps n bytes of the physical allocation h, from its offset off,
// at p inside a reservation (cuMemMap). The mapping holds h's memory even
// after MemRelease; it is not accessible before MemSetAccess.
func (d *Driver) MemMap(p DevicePtr, n, off uint64, h MemHandle) error {
	if err := d.vmmCheck(symMemMap); err != nil {
		return err
	}
	return d.check(symMemMap, C.wc_mem_map(d.fn[symMemMap], C.CUdeviceptr(p), C.size_t(n), C.size_t(off), C.CUmemGenericAllocationHandle(h)))
}

// MemSetAccess grants device the access flags (MemAccessReadWrite,
// MemAccessRead) to the mapped range [p, p+n) (cuMemSetAccess).
func (d *Driver) MemSetAccess(p DevicePtr, n uint64, device Device, flags uint32) error {
	if err := d.vmmCheck(symMemSetAccess); err != nil {
		return err
	}
	return d.check(symMemSetAccess, C.wc_mem_set_access(d.fn[symMemSetAccess], C.CUdeviceptr(p), C.size_t(n), C.int(device), C.uint(flags)))
}

// MemUnmap unmaps [p, p+n), which MemMap mapped (cuMemUnmap).
func (d *Driver) MemUnmap(p DevicePtr, n uint64) error {
	if err := d.vmmCheck(symMemUnmap); err != nil {
		return err
	}
	return d.check(symMemUnmap, C.wc_dptr_size_call(d.fn[symMemUnmap], C.CUdeviceptr(p), C.size_t(n)))
}

// MemAddressFree frees a MemAddressReserve reservation (cuMemAddressFree);
// unmap everything in it first.
func (d *Driver) MemAddressFree(p DevicePtr, n uint64) error {
	if err := d.vmmCheck(symMemAddressFree); err != nil {
		return err
	}
	return d.check(symMemAddressFree, C.wc_dptr_size_call(d.fn[symMemAddressFree], C.CUdeviceptr(p), C.size_t(n)))
}

// MemRelease releases a handle of MemCreate or MemImportFD (cuMemRelease).
// The memory is freed when no mapping and no exported descriptor is left.
func (d *Driver) MemRelease(h MemHandle) error {
	if err := d.vmmCheck(symMemRelease); err != nil {
		return err
	}
	return d.check(symMemRelease, C.wc_mem_release(d.fn[symMemRelease], C.CUmemGenericAllocationHandle(h)))
}
