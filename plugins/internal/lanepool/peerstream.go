package lanepool

import (
	"errors"
	"fmt"

	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/sdk/fill"
)

// PeerStream is one stream of a device-to-device copy (gpucore.PeerStream)
// over a vendor's Streams: a non-blocking stream and depth events, one
// recorded after each queued copy, the copy itself the vendor's peer copy
// (Copy: cuMemcpyPeerAsync, hipMemcpyPeerAsync).
type PeerStream[S comparable, B Buffer, E any] struct {
	api    Streams[S, B, E]
	copy   func(dst, src gpucore.Ptr, n uint64, s S) error
	unbind func() error
	stream S
	events []E
}

// NewPeerStream binds the calling thread to the destination device (bind;
// unbind, when not nil, undoes it at Close or on failure) and creates a
// stream and depth events there.
func NewPeerStream[S comparable, B Buffer, E any](api Streams[S, B, E], bind, unbind func() error, copy func(dst, src gpucore.Ptr, n uint64, s S) error, depth int) (*PeerStream[S, B, E], error) {
	if err := bind(); err != nil {
		return nil, fmt.Errorf("make the destination device current on a copy stream: %w", err)
	}
	p := &PeerStream[S, B, E]{api: api, copy: copy, unbind: unbind}
	var err error
	if p.stream, err = api.StreamCreate(); err != nil {
		return nil, errors.Join(fmt.Errorf("create a copy stream: %w", err), p.Close())
	}
	for range depth {
		ev, err := api.EventCreate()
		if err != nil {
			return nil, errors.Join(fmt.Errorf("create a copy event: %w", err), p.Close())
		}
		p.events = append(p.events, ev)
	}
	return p, nil
}

// CopyAsync queues the vendor's peer copy and records the slot's event
// after it.
func (p *PeerStream[S, B, E]) CopyAsync(slot int, dst, src gpucore.Ptr, n uint64) (fill.Completion, error) {
	if err := p.copy(dst, src, n, p.stream); err != nil {
		return nil, err
	}
	if err := p.api.EventRecord(p.events[slot], p.stream); err != nil {
		return nil, err
	}
	return eventCompletion[S, B, E]{api: p.api, ev: p.events[slot]}, nil
}

// Close waits for the stream, frees it and its events, and unbinds the
// thread.
func (p *PeerStream[S, B, E]) Close() error {
	var none S
	var errs []error
	if p.stream != none {
		errs = append(errs, p.api.StreamSynchronize(p.stream))
	}
	for _, ev := range p.events {
		errs = append(errs, p.api.EventDestroy(ev))
	}
	if p.stream != none {
		errs = append(errs, p.api.StreamDestroy(p.stream))
	}
	if p.unbind != nil {
		errs = append(errs, p.unbind())
	}
	*p = PeerStream[S, B, E]{}
	return errors.Join(errs...)
}
