package cudabackend

import (
	"errors"

	"github.com/wcache/wcache/plugins/cuda/driver"
)

// stager is a device's ring of pinned staging buffers, each with the event
// recorded after the last copy out of it. While the GPU copies out of one
// buffer, the next is filled from disk; a buffer is refilled only after its
// event has completed. Owned by the device's worker; Load holds the
// worker's load lock while it uses it.
type stager struct {
	bufs   []driver.HostBuffer
	events []driver.Event
}

// newStager allocates n pinned buffers of size bytes and their events;
// on the worker thread.
func newStager(drv *driver.Driver, n, size int) (*stager, error) {
	s := &stager{}
	for range n {
		b, err := drv.MemHostAlloc(size, 0)
		if err != nil {
			return nil, errors.Join(err, s.free(drv))
		}
		s.bufs = append(s.bufs, b)
		ev, err := drv.EventCreate(driver.EventDisableTiming)
		if err != nil {
			return nil, errors.Join(err, s.free(drv))
		}
		s.events = append(s.events, ev)
	}
	return s, nil
}

// free releases the buffers and events; on the worker thread, after the
// stream has drained.
func (s *stager) free(drv *driver.Driver) error {
	var errs []error
	for _, ev := range s.events {
		errs = append(errs, drv.EventDestroy(ev))
	}
	for _, b := range s.bufs {
		errs = append(errs, drv.MemFreeHost(b))
	}
	s.bufs, s.events = nil, nil
	return errors.Join(errs...)
}
