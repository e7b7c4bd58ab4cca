package cudabackend

import (
	"context"
	"errors"
	"fmt"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/internal/lanepool"
	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/sdk/fill"
)

// lane is one fill reader's non-blocking stream, its ring of pinned
// staging buffers (cuMemHostAlloc, placed on the GPU's NUMA node where it
// is known) and one event per buffer, recorded after the last copy out of
// it. A device's lanes live in a lanepool.Pool shared by its Loads.
type lane struct {
	stream driver.Stream
	bufs   []driver.HostBuffer
	events []driver.Event
}

// newLanePool makes a device's pool of at most max lanes.
func newLanePool(drv *driver.Driver, max int, place *staging.Placer, log hclog.Logger) *lanepool.Pool[*lane] {
	return lanepool.New(max, lanepool.Funcs[*lane]{
		Create:  func(buffers, size int) (*lane, error) { return createLane(drv, place, buffers, size) },
		Destroy: func(l *lane) error { return destroyLane(drv, l) },
		Fits:    func(l *lane, buffers, size int) bool { return len(l.bufs) == buffers && l.bufs[0].Len() >= size },
	}, log)
}

// createLane allocates a lane in the current context.
func createLane(drv *driver.Driver, place *staging.Placer, buffers, size int) (*lane, error) {
	l := &lane{}
	fail := func(err error) (*lane, error) { return nil, errors.Join(err, destroyLane(drv, l)) }
	var err error
	if l.stream, err = drv.StreamCreate(driver.StreamNonBlocking); err != nil {
		return fail(fmt.Errorf("create a fill stream: %w", err))
	}
	for range buffers {
		ev, err := drv.EventCreate(driver.EventDisableTiming)
		if err != nil {
			return fail(fmt.Errorf("create a staging event: %w", err))
		}
		l.events = append(l.events, ev)
		var b driver.HostBuffer
		err = place.Alloc(func() error {
			var err error
			b, err = drv.MemHostAlloc(size, 0)
			return err
		})
		if err != nil {
			return fail(fmt.Errorf("allocate %d bytes of pinned staging memory: %w", size, err))
		}
		l.bufs = append(l.bufs, b)
	}
	return l, nil
}

// destroyLane waits for l's stream and frees what l holds; in the context.
func destroyLane(drv *driver.Driver, l *lane) error {
	var errs []error
	if l.stream != (driver.Stream{}) {
		errs = append(errs, drv.StreamSynchronize(l.stream))
	}
	for _, ev := range l.events {
		errs = append(errs, drv.EventDestroy(ev))
	}
	for _, b := range l.bufs {
		errs = append(errs, drv.MemFreeHost(b))
	}
	if l.stream != (driver.Stream{}) {
		errs = append(errs, drv.StreamDestroy(l.stream))
	}
	*l = lane{}
	return errors.Join(errs...)
}

// copier is the fill pipeline's view of one allocation: lanes from the
// device's pool whose copies go to the allocation at base.
type copier struct {
	drv  *driver.Driver
	pool *lanepool.Pool[*lane]
	ctx  driver.Context // the primary context, made current on readers
	base driver.DevicePtr
	log  hclog.Logger
}

// Acquire makes the primary context current on the calling thread (a fill
// reader, locked to it) and takes a lane; on error the thread has no
// context current.
func (c copier) Acquire(ctx context.Context, buffers, size int) (fill.Lane, error) {
	if err := c.drv.CtxSetCurrent(c.ctx); err != nil {
		return nil, fmt.Errorf("make the primary context current on a fill reader: %w", err)
	}
	l, err := c.pool.Take(ctx, buffers, size)
	if err != nil {
		return nil, errors.Join(err, c.drv.CtxSetCurrent(driver.Context{}))
	}
	return &boundLane{lane: l, c: c}, nil
}

// boundLane is a lane serving one fill.
type boundLane struct {
	*lane
	c copier
}

func (l *boundLane) Buffer(i int) []byte { return l.bufs[i].Bytes() }

// CopyAsync queues cuMemcpyHtoDAsync_v2 on the lane's stream and records
// buffer i's event after it.
func (l *boundLane) CopyAsync(i, off, n int, dst uint64) (fill.Completion, error) {
	drv := l.c.drv
	if err := drv.MemcpyHtoDAsync(l.c.base+driver.DevicePtr(dst), l.bufs[i], off, n, l.stream); err != nil {
		return nil, err
	}
	if err := drv.EventRecord(l.events[i], l.stream); err != nil {
		return nil, err
	}
	return eventCompletion{drv: drv, ev: l.events[i]}, nil
}

// Release gives the lane back (a failed one is destroyed) and leaves the
// thread with no context current.
func (l *boundLane) Release(failed error) {
	l.c.pool.Put(l.lane, failed)
	if err := l.c.drv.CtxSetCurrent(driver.Context{}); err != nil {
		l.c.log.Warn("clear the context of a fill reader", "error", err)
	}
}

// eventCompletion waits for a copy by synchronising on the event recorded
// after it.
type eventCompletion struct {
	drv *driver.Driver
	ev  driver.Event
}

func (c eventCompletion) Wait() error { return c.drv.EventSynchronize(c.ev) }
