package cudabackend

import (
	"fmt"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/plugins/internal/lanepool"
)

// Peer copies (gpucore.PeerDriver): cuPointerGetAttribute finds the device
// of an imported source, cuDeviceCanAccessPeer whether the pair has a P2P
// path, and cuMemcpyPeerAsync copies on streams of the destination's
// primary context. The three entry points are optional (driver.HasPeer):
// without them a peer copy is ErrUnsupported. Opening the source with
// CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (IpcOpen) enables the access itself.

var _ gpucore.PeerDriver = cudaDriver{}

// PeerSupport fails when the driver lacks a peer-copy entry point.
func (d cudaDriver) PeerSupport() error {
	if !d.rt.drv.HasPeer() {
		return fmt.Errorf("the CUDA driver %s lacks cuPointerGetAttribute, cuDeviceCanAccessPeer or cuMemcpyPeerAsync", d.rt.drv.Path())
	}
	return nil
}

// PointerDevice maps the driver's device of p to this backend's ordinal
// (-1: a device the process does not see).
func (d cudaDriver) PointerDevice(p gpucore.Ptr) (int, error) {
	dev, err := d.rt.drv.PointerDeviceOrdinal(driver.DevicePtr(p))
	if err != nil {
		return -1, err
	}
	for _, info := range d.rt.devices {
		if int(info.dev) == dev {
			return info.ordinal, nil
		}
	}
	return -1, nil
}

// CanAccessPeer is cuDeviceCanAccessPeer(dst, src).
func (d cudaDriver) CanAccessPeer(dst, src int) (bool, error) {
	return d.rt.drv.DeviceCanAccessPeer(d.rt.devices[dst].dev, d.rt.devices[src].dev)
}

// NewPeerStream makes dst's primary context current on the calling thread
// and returns a lanepool.PeerStream of cuMemcpyPeerAsync copies there.
func (d cudaDriver) NewPeerStream(dst, src *gpucore.Worker, depth int) (gpucore.PeerStream, error) {
	drv := d.rt.drv
	dstCtx, srcCtx := dst.State.(driver.Context), src.State.(driver.Context)
	return lanepool.NewPeerStream[driver.Stream, driver.HostBuffer, driver.Event](streams{drv},
		func() error { return drv.CtxSetCurrent(dstCtx) },
		func() error { return drv.CtxSetCurrent(driver.Context{}) },
		func(to, from gpucore.Ptr, n uint64, s driver.Stream) error {
			return drv.MemcpyPeerAsync(driver.DevicePtr(to), dstCtx, driver.DevicePtr(from), srcCtx, n, s)
		}, depth)
}
