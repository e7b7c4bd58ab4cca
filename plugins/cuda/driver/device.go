package driver

// #include "trampolines.h"
import "C"

import (
	"strconv"
	"unsafe"

	"github.com/wcache/wcache/plugins/cuda/gpuid"
)

// Device is a CUdevice: a handle for an ordinal in the process-visible,
// ordered device space.
type Device int32

// Attribute is a CUdevice_attribute.
type Attribute int32

// Device attributes the backend reads (cuda.h).
const (
	AttrComputeMode            Attribute = 20
	AttrPCIBusID               Attribute = 33
	AttrPCIDeviceID            Attribute = 34
	AttrUnifiedAddressing      Attribute = 41
	AttrPCIDomainID            Attribute = 50
	AttrComputeCapabilityMajor Attribute = 75
	AttrComputeCapabilityMinor Attribute = 76
	// AttrVirtualMemoryManagementSupported: cuMemCreate, cuMemMap … work.
	AttrVirtualMemoryManagementSupported Attribute = 102
	// AttrHandleTypePosixFDSupported: cuMemCreate memory can be exported
	// as a POSIX file descriptor.
	AttrHandleTypePosixFDSupported Attribute = 103
)

// ComputeMode is a CUcomputemode, the value of AttrComputeMode.
type ComputeMode int

// Compute modes (cuda.h; 1, EXCLUSIVE_THREAD, was removed in CUDA 8).
const (
	ComputeModeDefault          ComputeMode = 0 // any number of contexts, from any process
	ComputeModeProhibited       ComputeMode = 2 // no context can be created
	ComputeModeExclusiveProcess ComputeMode = 3 // contexts of one process only (MPS lifts this)
)

// String returns the nvidia-smi name of the mode.
func (m ComputeMode) String() string {
	switch m {
	case ComputeModeDefault:
		return "Default"
	case ComputeModeProhibited:
		return "Prohibited"
	case ComputeModeExclusiveProcess:
		return "Exclusive_Process"
	}
	return "ComputeMode(" + strconv.Itoa(int(m)) + ")"
}

// Init calls cuInit(0). The driver reads CUDA_VISIBLE_DEVICES and
// CUDA_DEVICE_ORDER now; later changes to them have no effect. It must
// precede every other call except ErrorName/ErrorString.
func (d *Driver) Init() error {
	return d.check(symInit, C.wc_init(d.fn[symInit], 0))
}

// Version returns cuDriverGetVersion (e.g. 12060 for 12.6, 13000 for 13.0).
func (d *Driver) Version() (int, error) {
	var v C.int
	if err := d.check(symDriverGetVersion, C.wc_int_out(d.fn[symDriverGetVersion], &v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount returns the number of devices this process sees.
func (d *Driver) DeviceCount() (int, error) {
	var n C.int
	if err := d.check(symDeviceGetCount, C.wc_int_out(d.fn[symDeviceGetCount], &n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// DeviceGet returns the device for a process-visible ordinal.
func (d *Driver) DeviceGet(ordinal int) (Device, error) {
	var dev C.CUdevice
	if err := d.check(symDeviceGet, C.wc_device_get(d.fn[symDeviceGet], &dev, C.int(ordinal))); err != nil {
		return 0, err
	}
	return Device(dev), nil
}

// DeviceName returns cuDeviceGetName.
func (d *Driver) DeviceName(dev Device) (string, error) {
	var buf [256]C.char
	if err := d.check(symDeviceGetName, C.wc_device_get_name(d.fn[symDeviceGetName], &buf[0], C.int(len(buf)), C.CUdevice(dev))); err != nil {
		return "", err
	}
	buf[len(buf)-1] = 0
	return C.GoString(&buf[0]), nil
}

// DeviceTotalMem returns cuDeviceTotalMem_v2 in bytes.
func (d *Driver) DeviceTotalMem(dev Device) (uint64, error) {
	var n C.size_t
	if err := d.check(symDeviceTotalMem, C.wc_device_total_mem(d.fn[symDeviceTotalMem], &n, C.CUdevice(dev))); err != nil {
		return 0, err
	}
	return uint64(n), nil
}

// DeviceAttribute returns cuDeviceGetAttribute.
func (d *Driver) DeviceAttribute(attr Attribute, dev Device) (int, error) {
	var v C.int
	if err := d.check(symDeviceGetAttribute, C.wc_device_get_attribute(d.fn[symDeviceGetAttribute], &v, C.int(attr), C.CUdevice(dev))); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceUUID returns the device's 16 UUID bytes from cuDeviceGetUuid_v2,
// which gives the MIG instance UUID in MIG mode, or from cuDeviceGetUuid
// when the driver lacks _v2 (then it is the physical GPU UUID on CUDA 12
// drivers).
func (d *Driver) DeviceUUID(dev Device) (gpuid.UUID, error) {
	if d.HasUUIDV2() {
		return d.deviceUUID(symDeviceGetUUIDV2, dev)
	}
	return d.deviceUUID(symDeviceGetUUID, dev)
}

// DeviceUUIDV1 returns the v1 cuDeviceGetUuid bytes: the physical GPU UUID
// on CUDA 11/12 drivers even in MIG mode (CUDA 13 changed it to the MIG
// UUID). The error is a *LoadError when the symbol is absent.
func (d *Driver) DeviceUUIDV1(dev Device) (gpuid.UUID, error) {
	if !d.HasUUIDV1() {
		return gpuid.UUID{}, &LoadError{Library: d.path, Missing: []string{symDeviceGetUUID.String()}}
	}
	return d.deviceUUID(symDeviceGetUUID, dev)
}

func (d *Driver) deviceUUID(s symbol, dev Device) (gpuid.UUID, error) {
	var u gpuid.UUID
	err := d.check(s, C.wc_device_get_uuid(d.fn[s], (*C.uchar)(unsafe.Pointer(&u[0])), C.CUdevice(dev)))
	return u, err
}
