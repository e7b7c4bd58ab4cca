package driver

// #include "trampolines.h"
import "C"

import (
	"fmt"

	"github.com/wcache/wcache/plugins/internal/dl"
)

// pointerAttributeDeviceOrdinal is CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL.
const pointerAttributeDeviceOrdinal = 9

// HasPeer reports whether the driver has the entry points of peer copies
// (cuPointerGetAttribute, cuDeviceCanAccessPeer, cuMemcpyPeerAsync); the
// driver is usable without them, and the backend then answers
// ErrUnsupported to a peer copy.
func (d *Driver) HasPeer() bool {
	return dl.Resolved(d.fn[symPointerGetAttribute : symMemcpyPeerAsync+1])
}

// missingPeer is the error of a peer call on a driver without it.
func (d *Driver) missingPeer(s symbol) error {
	if d.fn[s] != nil {
		return nil
	}
	return fmt.Errorf("%s: the CUDA driver %s lacks it", s, d.path)
}

// PointerDeviceOrdinal returns the ordinal of the device whose memory p
// is (cuPointerGetAttribute CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL), in the
// current context.
func (d *Driver) PointerDeviceOrdinal(p DevicePtr) (int, error) {
	if err := d.missingPeer(symPointerGetAttribute); err != nil {
		return 0, err
	}
	var v C.int
	if err := d.check(symPointerGetAttribute, C.wc_pointer_get_attribute_int(d.fn[symPointerGetAttribute], &v, pointerAttributeDeviceOrdinal, C.CUdeviceptr(p))); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCanAccessPeer reports whether dev can access peer's memory
// directly (cuDeviceCanAccessPeer): a P2P path over NVLink or PCIe.
func (d *Driver) DeviceCanAccessPeer(dev, peer Device) (bool, error) {
	if err := d.missingPeer(symDeviceCanAccessPeer); err != nil {
		return false, err
	}
	var can C.int
	if err := d.check(symDeviceCanAccessPeer, C.wc_device_can_access_peer(d.fn[symDeviceCanAccessPeer], &can, C.CUdevice(dev), C.CUdevice(peer))); err != nil {
		return false, err
	}
	return can != 0, nil
}

// MemcpyPeerAsync queues a copy of n bytes from src in srcCtx's device
// memory to dst in dstCtx's on the stream (cuMemcpyPeerAsync).
func (d *Driver) MemcpyPeerAsync(dst DevicePtr, dstCtx Context, src DevicePtr, srcCtx Context, n uint64, s Stream) error {
	if err := d.missingPeer(symMemcpyPeerAsync); err != nil {
		return err
	}
	return d.check(symMemcpyPeerAsync, C.wc_memcpy_peer_async(d.fn[symMemcpyPeerAsync], C.CUdeviceptr(dst), dstCtx.p, C.CUdeviceptr(src), srcCtx.p, C.size_t(n), s.p))
}
