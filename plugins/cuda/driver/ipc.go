package driver

// #include "trampolines.h"
import "C"

import "unsafe"

// IPCHandleSize is CU_IPC_HANDLE_SIZE.
const IPCHandleSize = 64

// IPCHandle is a CUipcMemHandle: 64 opaque bytes.
type IPCHandle [IPCHandleSize]byte

// IpcGetMemHandle returns the legacy IPC handle of a MemAlloc allocation
// base (cuIpcGetMemHandle).
func (d *Driver) IpcGetMemHandle(p DevicePtr) (IPCHandle, error) {
	var h IPCHandle
	err := d.check(symIpcGetMemHandle, C.wc_ipc_get_mem_handle(d.fn[symIpcGetMemHandle], (*C.uchar)(unsafe.Pointer(&h[0])), C.CUdeviceptr(p)))
	return h, err
}

// IpcOpenMemHandle maps a handle exported by another process into the
// current context (cuIpcOpenMemHandle_v2). The exporting process itself
// cannot open its own handles (the driver answers with a context error).
// Within one context, opening the same handle again returns the same
// pointer and needs one more IpcCloseMemHandle.
func (d *Driver) IpcOpenMemHandle(h IPCHandle, flags uint32) (DevicePtr, error) {
	var p C.CUdeviceptr
	if err := d.check(symIpcOpenMemHandle, C.wc_ipc_open_mem_handle(d.fn[symIpcOpenMemHandle], &p, (*C.uchar)(unsafe.Pointer(&h[0])), C.uint(flags))); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

// IpcCloseMemHandle unmaps one IpcOpenMemHandle.
func (d *Driver) IpcCloseMemHandle(p DevicePtr) error {
	return d.check(symIpcCloseMemHandle, C.wc_dptr_call(d.fn[symIpcCloseMemHandle], C.CUdeviceptr(p)))
}
