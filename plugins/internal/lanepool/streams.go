package lanepool

import (
	"context"
	"errors"
	"fmt"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/sdk/fill"
)

// Buffer is a pinned host staging buffer of a vendor's API.
type Buffer interface {
	Bytes() []byte
	Len() int
}

// Streams are the vendor calls a StreamLane is made of: CUDA's or HIP's
// streams, events and pinned memory, each called on a thread where the
// lane's device (context) is current. S is a stream (its zero value none),
// B a pinned buffer, E an event.
type Streams[S comparable, B Buffer, E any] interface {
	// StreamCreate makes a non-blocking stream.
	StreamCreate() (S, error)
	StreamSynchronize(S) error
	StreamDestroy(S) error
	// EventCreate makes an event without timing.
	EventCreate() (E, error)
	EventRecord(E, S) error
	EventSynchronize(E) error
	EventDestroy(E) error
	// HostAlloc allocates size bytes of pinned host memory.
	HostAlloc(size int) (B, error)
	HostFree(B) error
	// CopyHtoD queues a copy of buf[off:off+n] to device address dst on s.
	CopyHtoD(dst uint64, buf B, off, n int, s S) error
}

// StreamLane is one fill reader's lane over Streams: a non-blocking
// stream, its ring of pinned staging buffers (placed on the GPU's NUMA node
// where it is known) and one event per buffer, recorded after the last
// copy out of it.
type StreamLane[S comparable, B Buffer, E any] struct {
	stream S
	bufs   []B
	events []E
}

// NewStreams returns a device's pool of at most max StreamLanes over api,
// their staging buffers allocated under place.
func NewStreams[S comparable, B Buffer, E any](api Streams[S, B, E], max int, place *staging.Placer, log hclog.Logger) *Pool[*StreamLane[S, B, E]] {
	return New(max, Funcs[*StreamLane[S, B, E]]{
		Create:  func(buffers, size int) (*StreamLane[S, B, E], error) { return createLane(api, place, buffers, size) },
		Destroy: func(l *StreamLane[S, B, E]) error { return destroyLane(api, l) },
		Fits: func(l *StreamLane[S, B, E], buffers, size int) bool {
			return len(l.bufs) == buffers && l.bufs[0].Len() >= size
		},
	}, log)
}

// createLane makes a lane on the calling thread's current device.
func createLane[S comparable, B Buffer, E any](api Streams[S, B, E], place *staging.Placer, buffers, size int) (*StreamLane[S, B, E], error) {
	l := &StreamLane[S, B, E]{}
	fail := func(err error) (*StreamLane[S, B, E], error) { return nil, errors.Join(err, destroyLane(api, l)) }
	var err error
	if l.stream, err = api.StreamCreate(); err != nil {
		return fail(fmt.Errorf("create a fill stream: %w", err))
	}
	for range buffers {
		ev, err := api.EventCreate()
		if err != nil {
			return fail(fmt.Errorf("create a staging event: %w", err))
		}
		l.events = append(l.events, ev)
		var b B
		err = place.Alloc(func() error {
			var err error
			b, err = api.HostAlloc(size)
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
func destroyLane[S comparable, B Buffer, E any](api Streams[S, B, E], l *StreamLane[S, B, E]) error {
	var none S
	var errs []error
	if l.stream != none {
		errs = append(errs, api.StreamSynchronize(l.stream))
	}
	for _, ev := range l.events {
		errs = append(errs, api.EventDestroy(ev))
	}
	for _, b := range l.bufs {
		errs = append(errs, api.HostFree(b))
	}
	if l.stream != none {
		errs = append(errs, api.StreamDestroy(l.stream))
	}
	*l = StreamLane[S, B, E]{}
	return errors.Join(errs...)
}

// StreamCopier is the fill pipeline's view (fill.Copier) of one
// allocation: lanes from the device's pool whose copies go to the
// allocation at Base.
type StreamCopier[S comparable, B Buffer, E any] struct {
	API  Streams[S, B, E]
	Pool *Pool[*StreamLane[S, B, E]]
	Base uint64
	// Bind makes the device current on the calling fill reader's thread
	// (locked to it by sdk/fill) before a lane is taken; its error says
	// so. Unbind, when not nil, undoes it when the lane is given back or
	// none could be taken (its error is logged to Log then).
	Bind   func() error
	Unbind func() error
	Log    hclog.Logger
}

// Acquire binds the calling thread to the device and takes a lane; on
// error the thread is unbound again.
func (c StreamCopier[S, B, E]) Acquire(ctx context.Context, buffers, size int) (fill.Lane, error) {
	if err := c.Bind(); err != nil {
		return nil, err
	}
	l, err := c.Pool.Take(ctx, buffers, size)
	if err != nil {
		if c.Unbind != nil {
			err = errors.Join(err, c.Unbind())
		}
		return nil, err
	}
	return &boundLane[S, B, E]{StreamLane: l, c: c}, nil
}

// boundLane is a lane serving one fill.
type boundLane[S comparable, B Buffer, E any] struct {
	*StreamLane[S, B, E]
	c StreamCopier[S, B, E]
}

func (l *boundLane[S, B, E]) Buffer(i int) []byte { return l.bufs[i].Bytes() }

// CopyAsync queues the copy out of buffer i on the lane's stream and
// records the buffer's event after it.
func (l *boundLane[S, B, E]) CopyAsync(i, off, n int, dst uint64) (fill.Completion, error) {
	api := l.c.API
	if err := api.CopyHtoD(l.c.Base+dst, l.bufs[i], off, n, l.stream); err != nil {
		return nil, err
	}
	if err := api.EventRecord(l.events[i], l.stream); err != nil {
		return nil, err
	}
	return eventCompletion[S, B, E]{api: api, ev: l.events[i]}, nil
}

// Release gives the lane back (a failed one is destroyed) and unbinds the
// thread.
func (l *boundLane[S, B, E]) Release(failed error) {
	l.c.Pool.Put(l.StreamLane, failed)
	if l.c.Unbind == nil {
		return
	}
	if err := l.c.Unbind(); err != nil && l.c.Log != nil {
		l.c.Log.Warn("unbind a fill reader from its device", "error", err)
	}
}

// eventCompletion waits for a copy by synchronising on the event recorded
// after it.
type eventCompletion[S comparable, B Buffer, E any] struct {
	api Streams[S, B, E]
	ev  E
}

func (c eventCompletion[S, B, E]) Wait() error { return c.api.EventSynchronize(c.ev) }
