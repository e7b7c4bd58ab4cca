package rocmbackend

import (
	"context"
	"errors"
	"fmt"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/lanepool"
	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/plugins/rocm/hip"
	"github.com/wcache/wcache/sdk/fill"
)

// lane is one fill reader's non-blocking stream, its ring of pinned
// staging buffers (hipHostMalloc, on the GPU's NUMA node where known) and
// one event per buffer, recorded after the last copy out of it.
type lane struct {
	stream hip.Stream
	bufs   []hip.HostBuffer
	events []hip.Event
}

// newLanePool makes a device's pool of at most max lanes.
func newLanePool(h *hip.Runtime, max int, place *staging.Placer, log hclog.Logger) *lanepool.Pool[*lane] {
	return lanepool.New(max, lanepool.Funcs[*lane]{
		Create: func(buffers, size int) (*lane, error) { return createLane(h, place, buffers, size) },
		Destroy: func(l *lane) error {
			return destroyLane(h, l)
		},
		Fits: func(l *lane, buffers, size int) bool { return len(l.bufs) == buffers && l.bufs[0].Len() >= size },
	}, log)
}

// createLane allocates a lane on the thread's current device.
func createLane(h *hip.Runtime, place *staging.Placer, buffers, size int) (*lane, error) {
	l := &lane{}
	fail := func(err error) (*lane, error) { return nil, errors.Join(err, destroyLane(h, l)) }
	var err error
	if l.stream, err = h.StreamCreate(hip.StreamNonBlocking); err != nil {
		return fail(fmt.Errorf("create a fill stream: %w", err))
	}
	for range buffers {
		ev, err := h.EventCreate(hip.EventDisableTiming)
		if err != nil {
			return fail(fmt.Errorf("create a staging event: %w", err))
		}
		l.events = append(l.events, ev)
		var b hip.HostBuffer
		err = place.Alloc(func() error {
			var err error
			b, err = h.HostMalloc(size, hip.HostMallocDefault)
			return err
		})
		if err != nil {
			return fail(fmt.Errorf("allocate %d bytes of pinned staging memory: %w", size, err))
		}
		l.bufs = append(l.bufs, b)
	}
	return l, nil
}

// destroyLane waits for l's stream and frees what l holds.
func destroyLane(h *hip.Runtime, l *lane) error {
	var errs []error
	if l.stream != (hip.Stream{}) {
		errs = append(errs, h.StreamSynchronize(l.stream))
	}
	for _, ev := range l.events {
		errs = append(errs, h.EventDestroy(ev))
	}
	for _, b := range l.bufs {
		errs = append(errs, h.HostFree(b))
	}
	if l.stream != (hip.Stream{}) {
		errs = append(errs, h.StreamDestroy(l.stream))
	}
	*l = lane{}
	return errors.Join(errs...)
}

// copier is the fill pipeline's view of one allocation: lanes from the
// device's pool whose copies go to the allocation at base.
type copier struct {
	hip     *hip.Runtime
	pool    *lanepool.Pool[*lane]
	ordinal int
	base    hip.DevicePtr
}

// Acquire makes the device current on the calling fill reader's thread
// (locked to it by sdk/fill) and takes a lane.
func (c copier) Acquire(ctx context.Context, buffers, size int) (fill.Lane, error) {
	if err := c.hip.SetDevice(c.ordinal); err != nil {
		return nil, fmt.Errorf("make device %d current on a fill reader: %w", c.ordinal, err)
	}
	l, err := c.pool.Take(ctx, buffers, size)
	if err != nil {
		return nil, err
	}
	return &boundLane{lane: l, c: c}, nil
}

// boundLane is a lane serving one fill.
type boundLane struct {
	*lane
	c copier
}

func (l *boundLane) Buffer(i int) []byte { return l.bufs[i].Bytes() }

// CopyAsync queues hipMemcpyHtoDAsync on the lane's stream and records
// buffer i's event after it.
func (l *boundLane) CopyAsync(i, off, n int, dst uint64) (fill.Completion, error) {
	h := l.c.hip
	if err := h.MemcpyHtoDAsync(l.c.base+hip.DevicePtr(dst), l.bufs[i], off, n, l.stream); err != nil {
		return nil, err
	}
	if err := h.EventRecord(l.events[i], l.stream); err != nil {
		return nil, err
	}
	return eventCompletion{hip: h, ev: l.events[i]}, nil
}

func (l *boundLane) Release(failed error) { l.c.pool.Put(l.lane, failed) }

// eventCompletion waits for a copy by synchronising on the event recorded
// after it.
type eventCompletion struct {
	hip *hip.Runtime
	ev  hip.Event
}

func (c eventCompletion) Wait() error { return c.hip.EventSynchronize(c.ev) }
