package driver

// #include "trampolines.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// DevicePtr is a CUdeviceptr.
type DevicePtr uint64

// HostMemAllocPortable etc. are cuMemHostAlloc flags.
const (
	HostMemAllocPortable      uint32 = 0x1
	HostMemAllocDeviceMap     uint32 = 0x2
	HostMemAllocWriteCombined uint32 = 0x4
)

// MemGetInfo returns the free and total bytes of the current context's
// device.
func (d *Driver) MemGetInfo() (free, total uint64, err error) {
	var f, t C.size_t
	if err := d.check(symMemGetInfo, C.wc_mem_get_info(d.fn[symMemGetInfo], &f, &t)); err != nil {
		return 0, 0, err
	}
	return uint64(f), uint64(t), nil
}

// MemAlloc allocates n bytes of device memory in the current context
// (cuMemAlloc_v2). Only such allocations can be exported with legacy IPC.
func (d *Driver) MemAlloc(n uint64) (DevicePtr, error) {
	var p C.CUdeviceptr
	if err := d.check(symMemAlloc, C.wc_mem_alloc(d.fn[symMemAlloc], &p, C.size_t(n))); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

// MemFree frees a MemAlloc allocation (cuMemFree_v2).
func (d *Driver) MemFree(p DevicePtr) error {
	return d.check(symMemFree, C.wc_dptr_call(d.fn[symMemFree], C.CUdeviceptr(p)))
}

// MemGetAddressRange returns the base and size of the allocation holding p.
func (d *Driver) MemGetAddressRange(p DevicePtr) (DevicePtr, uint64, error) {
	var base C.CUdeviceptr
	var size C.size_t
	if err := d.check(symMemGetAddressRange, C.wc_mem_get_address_range(d.fn[symMemGetAddressRange], &base, &size, C.CUdeviceptr(p))); err != nil {
		return 0, 0, err
	}
	return DevicePtr(base), uint64(size), nil
}

// HostBuffer is page-locked host memory from cuMemHostAlloc. It is C
// memory: it may be handed to the driver and to syscalls freely, and is
// never moved by the Go runtime.
type HostBuffer struct {
	p    unsafe.Pointer
	size int
}

// Bytes returns the buffer as a slice. It is invalid after MemFreeHost.
func (b HostBuffer) Bytes() []byte {
	if b.p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(b.p), b.size)
}

// Len returns the buffer size in bytes.
func (b HostBuffer) Len() int { return b.size }

// Addr returns the buffer's address, for alignment checks.
func (b HostBuffer) Addr() uintptr { return uintptr(b.p) }

// MemHostAlloc allocates n bytes of pinned host memory in the current
// context.
func (d *Driver) MemHostAlloc(n int, flags uint32) (HostBuffer, error) {
	if n <= 0 {
		return HostBuffer{}, fmt.Errorf("cuMemHostAlloc: size %d: %w", n, ErrorInvalidValue.Kind())
	}
	var p unsafe.Pointer
	if err := d.check(symMemHostAlloc, C.wc_mem_host_alloc(d.fn[symMemHostAlloc], &p, C.size_t(n), C.uint(flags))); err != nil {
		return HostBuffer{}, err
	}
	return HostBuffer{p: p, size: n}, nil
}

// MemFreeHost frees a MemHostAlloc buffer.
func (d *Driver) MemFreeHost(b HostBuffer) error { return d.ptrCall(symMemFreeHost, b.p) }

// MemcpyHtoDAsync enqueues a copy of n bytes at off in src to dst on the
// stream (cuMemcpyHtoDAsync_v2). src must stay untouched until the copy has
// completed (record an event after it and synchronise on that).
func (d *Driver) MemcpyHtoDAsync(dst DevicePtr, src HostBuffer, off, n int, s Stream) error {
	if off < 0 || n < 0 || off > src.size || n > src.size-off {
		return fmt.Errorf("cuMemcpyHtoDAsync_v2: range [%d,+%d) outside %d-byte staging buffer: %w", off, n, src.size, ErrorInvalidValue.Kind())
	}
	return d.check(symMemcpyHtoDAsync, C.wc_memcpy_htod_async(d.fn[symMemcpyHtoDAsync], C.CUdeviceptr(dst), unsafe.Add(src.p, off), C.size_t(n), s.p))
}

// MemcpyDtoH copies len(dst) bytes from src into dst, synchronously with
// respect to the host (cuMemcpyDtoH_v2). It does not wait for work on
// non-blocking streams: synchronise those first.
func (d *Driver) MemcpyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return d.check(symMemcpyDtoH, C.wc_memcpy_dtoh(d.fn[symMemcpyDtoH], unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst))))
}
