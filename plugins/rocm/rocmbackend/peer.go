package rocmbackend

import (
	"errors"
	"fmt"

	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/plugins/rocm/hip"
	"github.com/wcache/wcache/sdk/fill"
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

// NewPeerStream makes dst current on the calling thread and creates a
// non-blocking stream and depth events on it.
func (d driver) NewPeerStream(dst, src *gpucore.Worker, depth int) (gpucore.PeerStream, error) {
	h := d.rt.hip
	if err := h.SetDevice(dst.Ordinal); err != nil {
		return nil, fmt.Errorf("make device %d current on a copy stream: %w", dst.Ordinal, err)
	}
	s := &peerStream{h: h, dst: dst.Ordinal, src: src.Ordinal}
	var err error
	if s.stream, err = h.StreamCreate(hip.StreamNonBlocking); err != nil {
		return nil, fmt.Errorf("create a copy stream: %w", err)
	}
	s.made = true
	for range depth {
		ev, err := h.EventCreate(hip.EventDisableTiming)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("create a copy event: %w", err), s.Close())
		}
		s.events = append(s.events, ev)
	}
	return s, nil
}

// peerStream is one stream of a peer copy.
type peerStream struct {
	h        *hip.Runtime
	dst, src int
	stream   hip.Stream
	made     bool
	events   []hip.Event
}

// CopyAsync queues hipMemcpyPeerAsync and records the slot's event.
func (s *peerStream) CopyAsync(slot int, dst, src gpucore.Ptr, n uint64) (fill.Completion, error) {
	if err := s.h.MemcpyPeerAsync(hip.DevicePtr(dst), s.dst, hip.DevicePtr(src), s.src, n, s.stream); err != nil {
		return nil, err
	}
	ev := s.events[slot]
	if err := s.h.EventRecord(ev, s.stream); err != nil {
		return nil, err
	}
	return eventWait{s.h, ev}, nil
}

// Close waits for the stream and frees it and its events (HIP's current
// device is per thread and harmless to leave).
func (s *peerStream) Close() error {
	var errs []error
	if s.made {
		errs = append(errs, s.h.StreamSynchronize(s.stream))
	}
	for _, ev := range s.events {
		errs = append(errs, s.h.EventDestroy(ev))
	}
	if s.made {
		errs = append(errs, s.h.StreamDestroy(s.stream))
	}
	return errors.Join(errs...)
}

// eventWait waits for a copy by synchronising on the event recorded after
// it.
type eventWait struct {
	h  *hip.Runtime
	ev hip.Event
}

func (w eventWait) Wait() error { return w.h.EventSynchronize(w.ev) }
