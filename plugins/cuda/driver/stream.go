package driver

// #include "trampolines.h"
import "C"

import "unsafe"

// Stream is a CUstream. The zero value is the legacy default stream.
type Stream struct{ p unsafe.Pointer }

// Event is a CUevent.
type Event struct{ p unsafe.Pointer }

// Stream and event creation flags (cuda.h).
const (
	StreamNonBlocking    uint32 = 0x1
	EventDisableTiming   uint32 = 0x2
	EventBlockingSync    uint32 = 0x1
	IPCMemLazyEnablePeer uint32 = 0x1
)

// StreamCreate creates a stream in the current context.
func (d *Driver) StreamCreate(flags uint32) (Stream, error) {
	var p unsafe.Pointer
	if err := d.check(symStreamCreate, C.wc_create_flags(d.fn[symStreamCreate], &p, C.uint(flags))); err != nil {
		return Stream{}, err
	}
	return Stream{p: p}, nil
}

// StreamDestroy destroys a stream (cuStreamDestroy_v2).
func (d *Driver) StreamDestroy(s Stream) error {
	return d.check(symStreamDestroy, C.wc_ptr_call(d.fn[symStreamDestroy], s.p))
}

// StreamSynchronize waits until all work queued on s has completed.
func (d *Driver) StreamSynchronize(s Stream) error {
	return d.check(symStreamSynchronize, C.wc_ptr_call(d.fn[symStreamSynchronize], s.p))
}

// EventCreate creates an event in the current context.
func (d *Driver) EventCreate(flags uint32) (Event, error) {
	var p unsafe.Pointer
	if err := d.check(symEventCreate, C.wc_create_flags(d.fn[symEventCreate], &p, C.uint(flags))); err != nil {
		return Event{}, err
	}
	return Event{p: p}, nil
}

// EventDestroy destroys an event (cuEventDestroy_v2).
func (d *Driver) EventDestroy(e Event) error {
	return d.check(symEventDestroy, C.wc_ptr_call(d.fn[symEventDestroy], e.p))
}

// EventRecord records e after the work queued so far on s.
func (d *Driver) EventRecord(e Event, s Stream) error {
	return d.check(symEventRecord, C.wc_event_record(d.fn[symEventRecord], e.p, s.p))
}

// EventSynchronize waits until the work before e's last record completed.
// An event never recorded completes at once.
func (d *Driver) EventSynchronize(e Event) error {
	return d.check(symEventSynchronize, C.wc_ptr_call(d.fn[symEventSynchronize], e.p))
}
