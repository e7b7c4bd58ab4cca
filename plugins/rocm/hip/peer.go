package hip

/*
#include "trampolines.h"
*/
import "C"

import (
	"errors"
	"fmt"

	"github.com/wcache/wcache/plugins/internal/dl"
)

// pointerAttributeDeviceOrdinal is HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL.
const pointerAttributeDeviceOrdinal = 9

// HasPeer reports whether the runtime has the peer-copy entry points
// (hipPointerGetAttribute, hipDeviceCanAccessPeer,
// hipDeviceEnablePeerAccess, hipMemcpyPeerAsync); HIP is usable without
// them, and the backend then answers ErrUnsupported to a peer copy.
func (r *Runtime) HasPeer() bool {
	return dl.Resolved(r.fn[symPointerGetAttribute : symMemcpyPeerAsync+1])
}

// missing is the error of a call to an optional entry point the library
// lacks, nil when it has it.
func (r *Runtime) missing(s symbol) error {
	if r.fn[s] != nil {
		return nil
	}
	return fmt.Errorf("%s: HIP %s lacks it", s, r.path)
}

// PointerDeviceOrdinal returns the device whose memory p is
// (hipPointerGetAttribute HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL).
func (r *Runtime) PointerDeviceOrdinal(p DevicePtr) (int, error) {
	if err := r.missing(symPointerGetAttribute); err != nil {
		return 0, err
	}
	var v C.int
	if err := r.check(symPointerGetAttribute, C.wh_pointer_get_attribute_int(r.fn[symPointerGetAttribute], &v, pointerAttributeDeviceOrdinal, C.uintptr_t(p))); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCanAccessPeer is hipDeviceCanAccessPeer(dev, peer): whether dev
// reaches peer's memory directly (xGMI or PCIe P2P).
func (r *Runtime) DeviceCanAccessPeer(dev, peer int) (bool, error) {
	if err := r.missing(symDeviceCanAccessPeer); err != nil {
		return false, err
	}
	var can C.int
	if err := r.check(symDeviceCanAccessPeer, C.wh_device_can_access_peer(r.fn[symDeviceCanAccessPeer], &can, C.int(dev), C.int(peer))); err != nil {
		return false, err
	}
	return can != 0, nil
}

// DeviceEnablePeerAccess is hipDeviceEnablePeerAccess(peer, 0) on the
// thread's device; access already enabled is no error.
func (r *Runtime) DeviceEnablePeerAccess(peer int) error {
	if err := r.missing(symDeviceEnablePeerAccess); err != nil {
		return err
	}
	err := r.check(symDeviceEnablePeerAccess, C.wh_int_uint_call(r.fn[symDeviceEnablePeerAccess], C.int(peer), 0))
	var e *Error
	if errors.As(err, &e) && e.Code == ErrorPeerAccessEnabled {
		return nil
	}
	return err
}

// MemcpyPeerAsync is hipMemcpyPeerAsync of n bytes from src on device
// srcDev to dst on device dstDev, on s (a stream of dstDev).
func (r *Runtime) MemcpyPeerAsync(dst DevicePtr, dstDev int, src DevicePtr, srcDev int, n uint64, s Stream) error {
	if err := r.missing(symMemcpyPeerAsync); err != nil {
		return err
	}
	return r.check(symMemcpyPeerAsync, C.wh_memcpy_peer_async(r.fn[symMemcpyPeerAsync], C.uintptr_t(dst), C.int(dstDev), C.uintptr_t(src), C.int(srcDev), C.size_t(n), s.p))
}
