package rocmbackend

import (
	"fmt"

	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/plugins/internal/lanepool"
	"github.com/wcache/wcache/plugins/rocm/hip"
)

// Peer copies (gpucore.PeerDriver): hipPointerGetAttribute finds the
// device of an imported source, hipDeviceCanAccessPeer whether the pair
// has a P2P path (then hipDeviceEnablePeerAccess enables it), and
// hipMemcpyPeerAsync copies on streams of the destination device. The
// entry points are optional (hip.HasPeer): without them a peer copy is
// ErrUnsupported.

var _ gpucore.PeerDriver = driver{}

// PeerSupport fails when HIP lacks a peer-copy entry point.
func (d driver) PeerSupport() error {
	if !d.rt.hip.HasPeer() {
		return fmt.Errorf("HIP %s lacks hipPointerGetAttribute, hipDeviceCanAccessPeer, hipDeviceEnablePeerAccess or hipMemcpyPeerAsync", d.rt.hip.Path())
	}
	return nil
}

// PointerDevice is the device of p; -1 beyond the devices this process
// sees.
func (d driver) PointerDevice(p gpucore.Ptr) (int, error) {
	dev, err := d.rt.hip.PointerDeviceOrdinal(hip.DevicePtr(p))
	if err != nil {
		return -1, err
	}
	if dev < 0 || dev >= len(d.rt.devices) {
		return -1, nil
	}
	return dev, nil
}

// CanAccessPeer is hipDeviceCanAccessPeer(dst, src); when it answers yes,
// the access is enabled on the calling thread's device (dst's worker).
func (d driver) CanAccessPeer(dst, src int) (bool, error) {
	can, err := d.rt.hip.DeviceCanAccessPeer(dst, src)
	if err != nil || !can {
		return false, err
	}
	if err := d.rt.hip.DeviceEnablePeerAccess(src); err != nil {
		return false, err
	}
	return true, nil
}

// NewPeerStream makes dst current on the calling thread and returns a
// lanepool.PeerStream of hipMemcpyPeerAsync copies on it (HIP's current
// device is per thread and harmless to leave: no unbind).
func (d driver) NewPeerStream(dst, src *gpucore.Worker, depth int) (gpucore.PeerStream, error) {
	h := d.rt.hip
	return lanepool.NewPeerStream[hip.Stream, hip.HostBuffer, hip.Event](streams{h},
		func() error { return h.SetDevice(dst.Ordinal) }, nil,
		func(to, from gpucore.Ptr, n uint64, s hip.Stream) error {
			return h.MemcpyPeerAsync(hip.DevicePtr(to), dst.Ordinal, hip.DevicePtr(from), src.Ordinal, n, s)
		}, depth)
}
