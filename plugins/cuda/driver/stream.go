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

// create calls the constructor s (cuStreamCreate, cuEventCreate) with
// flags and returns the handle it made, nil when it failed.
func (d *Driver) create(s symbol, flags uint32) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	if err := d.check(s, C.wc_create_flags(d.fn[s], &p, C.uint(flags))); err != nil {
		return nil, err
	}
	return p, nil
}

// ptrCall calls the entry point s with one handle or pointer.
func (d *Driver) ptrCall(s symbol, p unsafe.Pointer) error {
	return d.check(s, C.wc_ptr_call(d.fn[s], p))
}

// StreamCreate creates a stream in the current context.
func (d *Driver) StreamCreate(flags uint32) (Stream, error) {
	p, err := d.create(symStreamCreate, flags)
	return Stream{p: p}, err
}

// StreamDestroy destroys a stream (cuStreamDestroy_v2).
func (d *Driver) StreamDestroy(s Stream) error { return d.ptrCall(symStreamDestroy, s.p) }

// StreamSynchronize waits until all work queued on s has completed.
func (d *Driver) StreamSynchronize(s Stream) error { return d.ptrCall(symStreamSynchronize, s.p) }

// EventCreate creates an event in the current context.
func (d *Driver) EventCreate(flags uint32) (Event, error) {
	p, err := d.create(symEventCreate, flags)
	return Event{p: p}, err
}

// EventDestroy destroys an event (cuEventDestroy_v2).
func (d *Driver) EventDestroy(e Event) error { return d.ptrCall(symEventDestroy, e.p) }

// EventRecord records e after the work queued so far on s.
func (d *Driver) EventRecord(e Event, s Stream) error {
	return d.check(symEventRecord, C.wc_event_record(d.fn[symEventRecord], e.p, s.p))
}

// EventSynchronize waits until the work before e's last record completed.
// An event never recorded completes at once.
func (d *Driver) EventSynchronize(e Event) error { return d.ptrCall(symEventSynchronize, e.p) }
