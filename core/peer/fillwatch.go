package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wcache/wcache/internal/defaults"
)

// DefaultRateWindow is FetchOptions.RateWindow's default: long enough to
// ride out a slow TCP start, a GC pause or a busy source, short enough
// that a stalled fill is given up within a minute.
const DefaultRateWindow = 30 * time.Second

// Errors of a fetch given up by its own bounds (errors.Is): the caller
// reads the files instead.
var (
	// ErrFillDeadline: FetchOptions.Deadline passed before the fetch was
	// committed.
	ErrFillDeadline = errors.New("peer fill deadline passed")
	// ErrFillTooSlow: fewer bytes than FetchOptions.MinRate arrived over
	// one FetchOptions.RateWindow.
	ErrFillTooSlow = errors.New("peer fill below the minimum rate")
)

// fillWatch bounds one fetch in time: it cancels the fetch's context with
// a cause wrapping ErrFillDeadline at the deadline, and one wrapping
// ErrFillTooSlow when a rate window ends with fewer bytes than the
// minimum rate asks. It counts the bytes the sink stored (so a sink that
// is slow to store, as a device load is, counts against the rate too).
type fillWatch struct {
	cancel  context.CancelCauseFunc
	minRate uint64
	window  time.Duration
	timer   *time.Timer

	bytes atomic.Uint64
	total atomic.Uint64 // the offer's bytes, once prepared

	mu    sync.Mutex
	cause error
	quit  chan struct{}
	once  sync.Once
}

// newFillWatch returns ctx bounded by opts.Deadline and a watch that
// bounds the rate once its sink is prepared. Without a deadline and a
// minimum rate it watches nothing.
func newFillWatch(ctx context.Context, opts FetchOptions) (context.Context, *fillWatch) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &fillWatch{cancel: cancel, minRate: opts.MinRate, window: opts.RateWindow, quit: make(chan struct{})}
	defaults.Positive(&w.window, DefaultRateWindow)
	if d := opts.Deadline; d > 0 {
		w.timer = time.AfterFunc(d, func() {
			w.fail(fmt.Errorf("%w: %s passed with %d of %d bytes received",
				ErrFillDeadline, d, w.bytes.Load(), w.total.Load()))
		})
	}
	return ctx, w
}

// fail gives the fetch up with cause (the first cause wins).
func (w *fillWatch) fail(cause error) {
	w.mu.Lock()
	if w.cause == nil {
		w.cause = cause
	}
	w.mu.Unlock()
	w.cancel(cause)
}

// stop ends the watch (the fetch returned) and releases its context.
func (w *fillWatch) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
	w.halt()
	w.cancel(nil)
}

// halt ends the rate watch (the bytes are all in, or the fetch failed).
func (w *fillWatch) halt() { w.once.Do(func() { close(w.quit) }) }

// explain makes err name the watch's cause when the watch gave the fetch
// up (a context error alone would not say why).
func (w *fillWatch) explain(err error) error {
	w.mu.Lock()
	cause := w.cause
	w.mu.Unlock()
	if err == nil || cause == nil || errors.Is(err, cause) {
		return err
	}
	return fmt.Errorf("%w (%v)", cause, err)
}

// watchRate checks, at the end of each window after the sink was
// prepared, that the window received at least minRate × window bytes.
func (w *fillWatch) watchRate() {
	if w.minRate == 0 {
		return
	}
	want := uint64(float64(w.minRate) * w.window.Seconds())
	go func() {
		t := time.NewTicker(w.window)
		defer t.Stop()
		last := w.bytes.Load()
		for {
			select {
			case <-w.quit:
				return
			case <-t.C:
			}
			now := w.bytes.Load()
			if got := now - last; got < want {
				w.fail(fmt.Errorf("%w: %d bytes in the last %s, at least %d B/s asked; %d of %d bytes received",
					ErrFillTooSlow, got, w.window, w.minRate, now, w.total.Load()))
				return
			}
			last = now
		}
	}()
}

// wrap returns sink counted and watched by w.
func (w *fillWatch) wrap(sink Sink) Sink { return &watchedSink{Sink: sink, w: w} }

// watchedSink is a Sink whose stored bytes a fillWatch counts.
type watchedSink struct {
	Sink
	w *fillWatch
}

func (s *watchedSink) Prepare(ctx context.Context, offer Offer) error {
	if err := s.Sink.Prepare(ctx, offer); err != nil {
		return err
	}
	s.w.total.Store(offer.Bytes())
	s.w.watchRate()
	return nil
}

func (s *watchedSink) WriteAt(arena int, p []byte, off uint64) error {
	err := s.Sink.WriteAt(arena, p, off)
	if err == nil && s.w.bytes.Add(uint64(len(p))) >= s.w.total.Load() {
		s.w.halt() // every byte is in: the digests and the commit are not the peer's rate
	}
	return err
}

func (s *watchedSink) Abort(cause error) {
	s.w.halt()
	s.Sink.Abort(cause)
}
