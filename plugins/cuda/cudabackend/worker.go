package cudabackend

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/sdk"
)

// errWorkerStopped is returned for work sent to a stopped device worker.
var errWorkerStopped = fmt.Errorf("device worker stopped (backend closed): %w", sdk.ErrUnavailable)

// worker runs every context-dependent driver call of one device on one OS
// thread, where the device's primary context was retained and made current
// once. Other goroutines send it closures and wait for them.
type worker struct {
	drv     *driver.Driver
	ordinal int
	dev     driver.Device
	jobs    chan job
	quit    chan struct{}
	done    chan struct{} // closed when the goroutine has cleaned up
	stopErr error         // cleanup error; read after done

	// ctx is the device's primary context, retained by the worker and
	// made current by each fill reader on its own thread.
	ctx driver.Context

	// loadMu is held for reading by every running Load (several run at
	// once, one per arena) and for writing by Close, which so waits for
	// them.
	loadMu sync.RWMutex

	// lanes are the device's fill lanes (a stream, events and pinned
	// staging buffers each), created by the first Loads and freed by
	// cleanup.
	lanesOnce sync.Once
	lanes     *lanePool
}

type job struct {
	fn  func() error
	res chan error
}

// startWorker starts the device's worker goroutine and waits until it has
// retained the primary context and made it current.
func startWorker(drv *driver.Driver, ordinal int, dev driver.Device) (*worker, error) {
	w := &worker{
		drv:     drv,
		ordinal: ordinal,
		dev:     dev,
		jobs:    make(chan job),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	ready := make(chan error, 1)
	go w.run(ready)
	if err := <-ready; err != nil {
		return nil, fmt.Errorf("device %d: %w", ordinal, err)
	}
	return w, nil
}

func (w *worker) run(ready chan<- error) {
	// The goroutine never unlocks: when it returns, the runtime ends the
	// thread, and with it the thread's CUDA state.
	runtime.LockOSThread()
	defer close(w.done)
	ctx, err := w.drv.PrimaryCtxRetain(w.dev)
	if err != nil {
		ready <- err
		return
	}
	if err := w.drv.CtxSetCurrent(ctx); err != nil {
		ready <- errors.Join(err, w.drv.PrimaryCtxRelease(w.dev))
		return
	}
	w.ctx = ctx
	ready <- nil
	for {
		select {
		case j := <-w.jobs:
			j.res <- j.fn()
		case <-w.quit:
			w.stopErr = w.cleanup()
			return
		}
	}
}

// cleanup releases the worker's driver resources; on the worker thread.
func (w *worker) cleanup() error {
	var errs []error
	if w.lanes != nil {
		errs = append(errs, w.lanes.free())
	}
	errs = append(errs,
		w.drv.CtxSetCurrent(driver.Context{}),
		w.drv.PrimaryCtxRelease(w.dev))
	return errors.Join(errs...)
}

// submit hands fn to the worker and returns a channel that receives its
// result. If ctx ends or the worker stops before the worker takes fn, the
// channel receives that error and fn never runs; once taken, fn runs to
// completion whatever ctx does.
func (w *worker) submit(ctx context.Context, fn func() error) <-chan error {
	res := make(chan error, 1)
	select {
	case w.jobs <- job{fn: fn, res: res}:
	case <-ctx.Done():
		res <- ctx.Err()
	case <-w.quit:
		res <- errWorkerStopped
	}
	return res
}

// do runs fn on the worker and returns its result (see submit).
func (w *worker) do(ctx context.Context, fn func() error) error {
	return <-w.submit(ctx, fn)
}

// stop ends the worker after the job in progress, releases its fill
// lanes and primary context, and returns any cleanup error. No Load may
// be running (Close holds loadMu).
func (w *worker) stop() error {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	<-w.done
	return w.stopErr
}
