package cudabackend

import (
	"errors"
	"fmt"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/sdk/fill"
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

// NewPeerStream makes dst's primary context current and creates a
// non-blocking stream and depth events in it.
func (d cudaDriver) NewPeerStream(dst, src *gpucore.Worker, depth int) (gpucore.PeerStream, error) {
	drv := d.rt.drv
	s := &peerStream{drv: drv, dstCtx: dst.State.(driver.Context), srcCtx: src.State.(driver.Context)}
	if err := drv.CtxSetCurrent(s.dstCtx); err != nil {
		return nil, fmt.Errorf("make the primary context current on a copy stream: %w", err)
	}
	var err error
	if s.stream, err = drv.StreamCreate(driver.StreamNonBlocking); err != nil {
		return nil, errors.Join(fmt.Errorf("create a copy stream: %w", err), drv.CtxSetCurrent(driver.Context{}))
	}
	s.made = true
	for range depth {
		ev, err := drv.EventCreate(driver.EventDisableTiming)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("create a copy event: %w", err), s.Close())
		}
		s.events = append(s.events, ev)
	}
	return s, nil
}

// peerStream is one stream of a peer copy.
type peerStream struct {
	drv            *driver.Driver
	dstCtx, srcCtx driver.Context
	stream         driver.Stream
	made           bool
	events         []driver.Event
}

// CopyAsync queues cuMemcpyPeerAsync and records the slot's event.
func (s *peerStream) CopyAsync(slot int, dst, src gpucore.Ptr, n uint64) (fill.Completion, error) {
	if err := s.drv.MemcpyPeerAsync(driver.DevicePtr(dst), s.dstCtx, driver.DevicePtr(src), s.srcCtx, n, s.stream); err != nil {
		return nil, err
	}
	ev := s.events[slot]
	if err := s.drv.EventRecord(ev, s.stream); err != nil {
		return nil, err
	}
	return eventWait{s.drv, ev}, nil
}

// Close waits for the stream, frees it and its events and unbinds the
// thread.
func (s *peerStream) Close() error {
	var errs []error
	if s.made {
		errs = append(errs, s.drv.StreamSynchronize(s.stream))
	}
	for _, ev := range s.events {
		errs = append(errs, s.drv.EventDestroy(ev))
	}
	if s.made {
		errs = append(errs, s.drv.StreamDestroy(s.stream))
	}
	return errors.Join(append(errs, s.drv.CtxSetCurrent(driver.Context{}))...)
}

// eventWait waits for a copy by synchronising on the event recorded after
// it.
type eventWait struct {
	drv *driver.Driver
	ev  driver.Event
}

func (w eventWait) Wait() error { return w.drv.EventSynchronize(w.ev) }
