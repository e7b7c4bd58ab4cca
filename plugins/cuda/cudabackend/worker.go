package cudabackend

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/internal/devthread"
)

// worker runs every context-dependent driver call of one device on one OS
// thread (a devthread.Thread), where the device's primary context was
// retained and made current once. Other goroutines send it closures and
// wait for them.
type worker struct {
	drv     *driver.Driver
	ordinal int
	dev     driver.Device
	thread  *devthread.Thread

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

// startWorker starts the device's worker thread and waits until it has
// retained the primary context and made it current.
func startWorker(drv *driver.Driver, ordinal int, dev driver.Device) (*worker, error) {
	w := &worker{drv: drv, ordinal: ordinal, dev: dev}
	t, err := devthread.Start(w.setup, w.cleanup)
	if err != nil {
		return nil, fmt.Errorf("device %d: %w", ordinal, err)
	}
	w.thread = t
	return w, nil
}

// setup retains the primary context and makes it current; on the thread.
func (w *worker) setup() error {
	ctx, err := w.drv.PrimaryCtxRetain(w.dev)
	if err != nil {
		return err
	}
	if err := w.drv.CtxSetCurrent(ctx); err != nil {
		return errors.Join(err, w.drv.PrimaryCtxRelease(w.dev))
	}
	w.ctx = ctx
	return nil
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

// submit hands fn to the worker (see devthread.Thread.Submit).
func (w *worker) submit(ctx context.Context, fn func() error) <-chan error {
	return w.thread.Submit(ctx, fn)
}

// do runs fn on the worker and returns its result (see submit).
func (w *worker) do(ctx context.Context, fn func() error) error {
	return w.thread.Do(ctx, fn)
}

// stop ends the worker after the job in progress, releases its fill
// lanes and primary context, and returns any cleanup error. No Load may
// be running (Close holds loadMu).
func (w *worker) stop() error { return w.thread.Stop() }
