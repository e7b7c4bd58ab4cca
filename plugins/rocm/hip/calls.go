package hip

/*
#include <stdlib.h>
#include "trampolines.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Sizes and flags of the HIP ABI (hip_runtime_api.h).
const (
	UUIDSize       = 16
	IPCHandleSize  = 64
	pciBusIDLength = 64
	nameLength     = 256

	// IPCMemLazyEnablePeerAccess is hipIpcMemLazyEnablePeerAccess, the only
	// flag hipIpcOpenMemHandle accepts (ROCm/clr rejects anything else with
	// hipErrorInvalidValue; headers before ROCm 1.x defined it as 0).
	IPCMemLazyEnablePeerAccess = 0x1
	StreamNonBlocking          = 0x1 // hipStreamNonBlocking
	EventDisableTiming         = 0x2 // hipEventDisableTiming
	HostMallocDefault          = 0x0 // hipHostMallocDefault
)

// Attribute is a hipDeviceAttribute_t (values of ROCm 6.x; the enum's
// CUDA-compatible part kept its order across 5.x and 6.x).
type Attribute int32

const (
	AttrComputeMode Attribute = 6
	AttrPCIBusID    Attribute = 67
	AttrPCIDeviceID Attribute = 68
	AttrPCIDomainID Attribute = 69
)

// ComputeMode is hipComputeMode.
type ComputeMode int

const (
	ComputeModeDefault          ComputeMode = 0
	ComputeModeExclusive        ComputeMode = 1
	ComputeModeProhibited       ComputeMode = 2
	ComputeModeExclusiveProcess ComputeMode = 3
)

// DevicePtr is a device address (hipDeviceptr_t).
type DevicePtr uintptr

// UUID is a hipUUID: on ROCm the 16 ASCII characters of the device's
// unique id (see plugins/rocm/amdid).
type UUID [UUIDSize]byte

// IPCHandle is a hipIpcMemHandle_t.
type IPCHandle [IPCHandleSize]byte

// Stream and Event are opaque HIP handles.
type (
	Stream struct{ p unsafe.Pointer }
	Event  struct{ p unsafe.Pointer }
)

// HostBuffer is pinned host memory from hipHostMalloc.
type HostBuffer struct {
	p unsafe.Pointer
	n int
}

// Bytes returns the buffer as a slice (C memory, not the Go heap).
func (b HostBuffer) Bytes() []byte { return unsafe.Slice((*byte)(b.p), b.n) }

// Len returns the buffer's size.
func (b HostBuffer) Len() int { return b.n }

// Init is hipInit(0): it applies ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES
// and CUDA_VISIBLE_DEVICES, read from the process environment then.
func (r *Runtime) Init() error {
	return r.check(symInit, C.wh_uint_call(r.fn[symInit], 0))
}

// DriverVersion is hipDriverGetVersion.
func (r *Runtime) DriverVersion() (int, error) {
	var v C.int
	err := r.check(symDriverGetVersion, C.wh_int_out(r.fn[symDriverGetVersion], &v))
	return int(v), err
}

// DeviceCount is hipGetDeviceCount: the devices this process sees.
func (r *Runtime) DeviceCount() (int, error) {
	var n C.int
	err := r.check(symGetDeviceCount, C.wh_int_out(r.fn[symGetDeviceCount], &n))
	return int(n), err
}

// DeviceGet is hipDeviceGet.
func (r *Runtime) DeviceGet(ordinal int) (int, error) {
	var d C.int
	err := r.check(symDeviceGet, C.wh_device_get(r.fn[symDeviceGet], &d, C.int(ordinal)))
	return int(d), err
}

// DeviceUUID is hipDeviceGetUuid.
func (r *Runtime) DeviceUUID(dev int) (UUID, error) {
	var u UUID
	err := r.check(symDeviceGetUUID, C.wh_device_get_uuid(r.fn[symDeviceGetUUID], (*C.uchar)(unsafe.Pointer(&u[0])), C.int(dev)))
	return u, err
}

func (r *Runtime) deviceString(s symbol, n int, dev int) (string, error) {
	buf := (*C.char)(C.calloc(C.size_t(n), 1))
	defer C.free(unsafe.Pointer(buf))
	if err := r.check(s, C.wh_device_string(r.fn[s], buf, C.int(n), C.int(dev))); err != nil {
		return "", err
	}
	return C.GoString(buf), nil
}

// DeviceName is hipDeviceGetName.
func (r *Runtime) DeviceName(dev int) (string, error) {
	return r.deviceString(symDeviceGetName, nameLength, dev)
}

// DevicePCIBusID is hipDeviceGetPCIBusId ("0000:c1:00.0").
func (r *Runtime) DevicePCIBusID(dev int) (string, error) {
	return r.deviceString(symDeviceGetPCIBusID, pciBusIDLength, dev)
}

// DeviceTotalMem is hipDeviceTotalMem.
func (r *Runtime) DeviceTotalMem(dev int) (uint64, error) {
	var n C.size_t
	err := r.check(symDeviceTotalMem, C.wh_device_total_mem(r.fn[symDeviceTotalMem], &n, C.int(dev)))
	return uint64(n), err
}

// DeviceAttribute is hipDeviceGetAttribute.
func (r *Runtime) DeviceAttribute(a Attribute, dev int) (int, error) {
	var v C.int
	err := r.check(symDeviceGetAttribute, C.wh_device_get_attribute(r.fn[symDeviceGetAttribute], &v, C.int(a), C.int(dev)))
	return int(v), err
}

// SetDevice is hipSetDevice: dev becomes the calling thread's device (its
// primary context is created on first use).
func (r *Runtime) SetDevice(dev int) error {
	return r.check(symSetDevice, C.wh_int_call(r.fn[symSetDevice], C.int(dev)))
}

// DeviceSynchronize is hipDeviceSynchronize on the thread's device.
func (r *Runtime) DeviceSynchronize() error {
	return r.check(symDeviceSynchronize, C.wh_void_call(r.fn[symDeviceSynchronize]))
}

// MemGetInfo is hipMemGetInfo on the thread's device.
func (r *Runtime) MemGetInfo() (free, total uint64, err error) {
	var f, t C.size_t
	err = r.check(symMemGetInfo, C.wh_mem_get_info(r.fn[symMemGetInfo], &f, &t))
	return uint64(f), uint64(t), err
}

// Malloc is hipMalloc on the thread's device.
func (r *Runtime) Malloc(n uint64) (DevicePtr, error) {
	var p C.uintptr_t
	if err := r.check(symMalloc, C.wh_malloc(r.fn[symMalloc], &p, C.size_t(n))); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

// Free is hipFree.
func (r *Runtime) Free(p DevicePtr) error { return r.ptrCall(symFree, uintptr(p)) }

// HasMemGetAddressRange reports whether the library exports
// hipMemGetAddressRange.
func (r *Runtime) HasMemGetAddressRange() bool { return r.fn[symMemGetAddressRange] != nil }

// MemGetAddressRange is hipMemGetAddressRange: the allocation holding p.
func (r *Runtime) MemGetAddressRange(p DevicePtr) (DevicePtr, uint64, error) {
	if !r.HasMemGetAddressRange() {
		return 0, 0, fmt.Errorf("%s: not exported by %s", symMemGetAddressRange, r.path)
	}
	var base C.uintptr_t
	var n C.size_t
	err := r.check(symMemGetAddressRange, C.wh_mem_get_address_range(r.fn[symMemGetAddressRange], &base, &n, C.uintptr_t(p)))
	return DevicePtr(base), uint64(n), err
}

// HostMalloc is hipHostMalloc: pinned host memory.
func (r *Runtime) HostMalloc(n int, flags uint) (HostBuffer, error) {
	var p unsafe.Pointer
	if err := r.check(symHostMalloc, C.wh_host_malloc(r.fn[symHostMalloc], &p, C.size_t(n), C.uint(flags))); err != nil {
		return HostBuffer{}, err
	}
	return HostBuffer{p: p, n: n}, nil
}

// HostFree is hipHostFree.
func (r *Runtime) HostFree(b HostBuffer) error { return r.ptrCall(symHostFree, uintptr(b.p)) }

// createWithFlags calls the constructor s (hipStreamCreateWithFlags,
// hipEventCreateWithFlags) and returns the handle it made.
func (r *Runtime) createWithFlags(s symbol, flags uint) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := r.check(s, C.wh_create_flags(r.fn[s], &p, C.uint(flags)))
	return p, err
}

// ptrCall calls the entry point s with one handle or address.
func (r *Runtime) ptrCall(s symbol, p uintptr) error {
	return r.check(s, C.wh_ptr_call(r.fn[s], C.uintptr_t(p)))
}

// StreamCreate is hipStreamCreateWithFlags on the thread's device.
func (r *Runtime) StreamCreate(flags uint) (Stream, error) {
	p, err := r.createWithFlags(symStreamCreateWithFlags, flags)
	return Stream{p}, err
}

// StreamDestroy is hipStreamDestroy.
func (r *Runtime) StreamDestroy(s Stream) error { return r.ptrCall(symStreamDestroy, uintptr(s.p)) }

// StreamSynchronize is hipStreamSynchronize.
func (r *Runtime) StreamSynchronize(s Stream) error {
	return r.ptrCall(symStreamSynchronize, uintptr(s.p))
}

// EventCreate is hipEventCreateWithFlags.
func (r *Runtime) EventCreate(flags uint) (Event, error) {
	p, err := r.createWithFlags(symEventCreateWithFlags, flags)
	return Event{p}, err
}

// EventDestroy is hipEventDestroy.
func (r *Runtime) EventDestroy(e Event) error { return r.ptrCall(symEventDestroy, uintptr(e.p)) }

// EventRecord is hipEventRecord.
func (r *Runtime) EventRecord(e Event, s Stream) error {
	return r.check(symEventRecord, C.wh_event_record(r.fn[symEventRecord], e.p, s.p))
}

// EventSynchronize is hipEventSynchronize.
func (r *Runtime) EventSynchronize(e Event) error {
	return r.ptrCall(symEventSynchronize, uintptr(e.p))
}

// MemcpyHtoDAsync is hipMemcpyHtoDAsync of src.Bytes()[off:off+n] to dst
// on s. src must stay untouched until the copy completed.
func (r *Runtime) MemcpyHtoDAsync(dst DevicePtr, src HostBuffer, off, n int, s Stream) error {
	if off < 0 || n < 0 || off+n > src.n {
		return fmt.Errorf("%s: [%d, +%d) outside a %d-byte staging buffer", symMemcpyHtoDAsync, off, n, src.n)
	}
	return r.check(symMemcpyHtoDAsync, C.wh_memcpy_htod_async(r.fn[symMemcpyHtoDAsync], C.uintptr_t(dst),
		unsafe.Add(src.p, off), C.size_t(n), s.p))
}

// MemcpyDtoH is hipMemcpyDtoH into dst (Go memory: the call is
// synchronous and keeps no pointer).
func (r *Runtime) MemcpyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return r.check(symMemcpyDtoH, C.wh_memcpy_dtoh(r.fn[symMemcpyDtoH], unsafe.Pointer(&dst[0]), C.uintptr_t(src), C.size_t(len(dst))))
}

// IpcGetMemHandle is hipIpcGetMemHandle of p.
func (r *Runtime) IpcGetMemHandle(p DevicePtr) (IPCHandle, error) {
	var h IPCHandle
	err := r.check(symIpcGetMemHandle, C.wh_ipc_get_mem_handle(r.fn[symIpcGetMemHandle], (*C.uchar)(unsafe.Pointer(&h[0])), C.uintptr_t(p)))
	return h, err
}

// IpcOpenMemHandle is hipIpcOpenMemHandle on the thread's device.
func (r *Runtime) IpcOpenMemHandle(h IPCHandle, flags uint) (DevicePtr, error) {
	var p C.uintptr_t
	err := r.check(symIpcOpenMemHandle, C.wh_ipc_open_mem_handle(r.fn[symIpcOpenMemHandle], &p, (*C.uchar)(unsafe.Pointer(&h[0])), C.uint(flags)))
	return DevicePtr(p), err
}

// IpcCloseMemHandle is hipIpcCloseMemHandle.
func (r *Runtime) IpcCloseMemHandle(p DevicePtr) error {
	return r.ptrCall(symIpcCloseMemHandle, uintptr(p))
}
