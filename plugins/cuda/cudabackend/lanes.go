package cudabackend

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/sdk/fill"
)

// lanePool holds a device's fill lanes. A lane is one fill reader's
// non-blocking stream, its ring of pinned staging buffers (cuMemHostAlloc,
// placed on the GPU's NUMA node where it is known) and one event per
// buffer, recorded after the last copy out of it. At most max lanes
// exist; Loads running at once (one per arena) share them, and a reader
// that finds none free waits. Lanes live until the worker stops.
type lanePool struct {
	drv  *driver.Driver
	ctx  driver.Context // the primary context, made current on readers
	log  hclog.Logger
	node int // NUMA node for staging memory; -1 when unknown
	// unplaced is set once placing on node failed (logged once).
	unplaced atomic.Bool
	// idle holds free lanes; slots one token per lane in existence.
	idle  chan *lane
	slots chan struct{}
}

// newLanePool makes the pool of a device whose primary context is ctx;
// node is the NUMA node to place staging memory on, -1 for none.
func newLanePool(drv *driver.Driver, ctx driver.Context, max, node int, log hclog.Logger) *lanePool {
	return &lanePool{drv: drv, ctx: ctx, log: log, node: node,
		idle: make(chan *lane, max), slots: make(chan struct{}, max)}
}

// lane is one reader's stream, buffers and events.
type lane struct {
	stream driver.Stream
	bufs   []driver.HostBuffer
	events []driver.Event
}

// acquire makes the primary context current on the calling thread (a
// fill reader, locked to it) and returns a free lane with buffers
// buffers of size bytes, creating one while fewer than max exist and
// waiting otherwise. On error the thread has no context current.
func (p *lanePool) acquire(ctx context.Context, buffers, size int) (*lane, error) {
	if err := p.drv.CtxSetCurrent(p.ctx); err != nil {
		return nil, fmt.Errorf("make the primary context current on a fill reader: %w", err)
	}
	l, err := p.take(ctx, buffers, size)
	if err != nil {
		return nil, errors.Join(err, p.drv.CtxSetCurrent(driver.Context{}))
	}
	return l, nil
}

func (p *lanePool) take(ctx context.Context, buffers, size int) (*lane, error) {
	var l *lane
	select {
	case l = <-p.idle:
	default:
		select {
		case l = <-p.idle:
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if l != nil && len(l.bufs) == buffers && l.bufs[0].Len() >= size {
		return l, nil
	}
	if l != nil {
		// Another shape (not with one Config): replace it, keeping its slot.
		if err := p.destroy(l); err != nil {
			p.log.Warn("free a fill lane", "error", err)
		}
	}
	l, err := p.create(buffers, size)
	if err != nil {
		<-p.slots
		return nil, err
	}
	return l, nil
}

// create allocates a lane in the current context.
func (p *lanePool) create(buffers, size int) (*lane, error) {
	l := &lane{}
	fail := func(err error) (*lane, error) { return nil, errors.Join(err, p.destroy(l)) }
	var err error
	if l.stream, err = p.drv.StreamCreate(driver.StreamNonBlocking); err != nil {
		return fail(fmt.Errorf("create a fill stream: %w", err))
	}
	for range buffers {
		ev, err := p.drv.EventCreate(driver.EventDisableTiming)
		if err != nil {
			return fail(fmt.Errorf("create a staging event: %w", err))
		}
		l.events = append(l.events, ev)
		b, err := p.hostAlloc(size)
		if err != nil {
			return fail(fmt.Errorf("allocate %d bytes of pinned staging memory: %w", size, err))
		}
		l.bufs = append(l.bufs, b)
	}
	return l, nil
}

// hostAlloc allocates pinned memory on the pool's NUMA node when it is
// known and the kernel lets this thread prefer it; unplaced otherwise.
func (p *lanePool) hostAlloc(size int) (driver.HostBuffer, error) {
	if p.node < 0 || p.unplaced.Load() {
		return p.drv.MemHostAlloc(size, 0)
	}
	var b driver.HostBuffer
	var allocErr error
	ran := false
	err := staging.OnNode(p.node, func() error {
		ran = true
		b, allocErr = p.drv.MemHostAlloc(size, 0)
		return allocErr
	})
	if ran {
		return b, allocErr
	}
	if p.unplaced.CompareAndSwap(false, true) {
		p.log.Warn("cannot place staging memory on the GPU's NUMA node; allocating it anywhere", "node", p.node, "error", err)
	}
	return p.drv.MemHostAlloc(size, 0)
}

// put gives l back after a fill; a lane that saw a failure is destroyed
// rather than reused. The calling thread is left with no context current.
func (p *lanePool) put(l *lane, failed error) {
	if failed != nil {
		if err := p.destroy(l); err != nil {
			p.log.Warn("free a failed fill lane", "error", err)
		}
		<-p.slots
	} else {
		p.idle <- l
	}
	if err := p.drv.CtxSetCurrent(driver.Context{}); err != nil {
		p.log.Warn("clear the context of a fill reader", "error", err)
	}
}

// destroy waits for l's stream and frees what l holds; in the context.
func (p *lanePool) destroy(l *lane) error {
	var errs []error
	if l.stream != (driver.Stream{}) {
		errs = append(errs, p.drv.StreamSynchronize(l.stream))
	}
	for _, ev := range l.events {
		errs = append(errs, p.drv.EventDestroy(ev))
	}
	for _, b := range l.bufs {
		errs = append(errs, p.drv.MemFreeHost(b))
	}
	if l.stream != (driver.Stream{}) {
		errs = append(errs, p.drv.StreamDestroy(l.stream))
	}
	*l = lane{}
	return errors.Join(errs...)
}

// free destroys every lane; on the worker thread, with no Load running.
func (p *lanePool) free() error {
	var errs []error
	for {
		select {
		case l := <-p.idle:
			errs = append(errs, p.destroy(l))
			<-p.slots
			continue
		default:
		}
		break
	}
	if n := len(p.slots); n > 0 {
		errs = append(errs, fmt.Errorf("%d fill lanes still in use when the device worker stopped", n))
	}
	return errors.Join(errs...)
}

// copier is the fill pipeline's view of one allocation: lanes from the
// device's pool whose copies go to the allocation at base.
type copier struct {
	pool *lanePool
	base driver.DevicePtr
}

func (c copier) Acquire(ctx context.Context, buffers, size int) (fill.Lane, error) {
	l, err := c.pool.acquire(ctx, buffers, size)
	if err != nil {
		return nil, err
	}
	return &boundLane{lane: l, pool: c.pool, base: c.base}, nil
}

// boundLane is a lane serving one fill.
type boundLane struct {
	*lane
	pool *lanePool
	base driver.DevicePtr
}

func (l *boundLane) Buffer(i int) []byte { return l.bufs[i].Bytes() }

// CopyAsync queues cuMemcpyHtoDAsync_v2 on the lane's stream and records
// buffer i's event after it.
func (l *boundLane) CopyAsync(i, off, n int, dst uint64) (fill.Completion, error) {
	drv := l.pool.drv
	if err := drv.MemcpyHtoDAsync(l.base+driver.DevicePtr(dst), l.bufs[i], off, n, l.stream); err != nil {
		return nil, err
	}
	if err := drv.EventRecord(l.events[i], l.stream); err != nil {
		return nil, err
	}
	return eventCompletion{drv: drv, ev: l.events[i]}, nil
}

func (l *boundLane) Release(failed error) { l.pool.put(l.lane, failed) }

// eventCompletion waits for a copy by synchronising on the event recorded
// after it.
type eventCompletion struct {
	drv *driver.Driver
	ev  driver.Event
}

func (c eventCompletion) Wait() error { return c.drv.EventSynchronize(c.ev) }
