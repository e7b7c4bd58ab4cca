package gpucore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/devthread"
	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/sdk"
)

// Runtime is the per-process state over a Driver: the device workers and
// the device memory registry. Several Backends may share one Runtime
// (NewBackend); memory exported by one can then be imported by another,
// which legacy IPC cannot do within one process.
type Runtime struct {
	drv       Driver
	log       hclog.Logger
	errClosed error
	closing   chan struct{} // closed when Close starts; running Loads stop

	mu      sync.Mutex
	closed  bool
	workers map[int]*Worker
	mems    map[*memory]struct{}
	exports map[Handle]*memory    // handles this process gave out
	imports map[importKey]*memory // handles this process opened
	// importMu serialises Import so that a handle is opened once per device.
	importMu sync.Mutex
	// startMu serialises starting device workers.
	startMu sync.Mutex
}

type importKey struct {
	handle  Handle
	ordinal int
}

// NewRuntime returns a Runtime over drv. logger may be nil.
func NewRuntime(drv Driver, logger hclog.Logger) *Runtime {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Runtime{
		drv: drv, log: logger,
		errClosed: fmt.Errorf("%s backend closed: %w", drv.Name(), sdk.ErrUnavailable),
		closing:   make(chan struct{}),
		workers:   map[int]*Worker{},
		mems:      map[*memory]struct{}{},
		exports:   map[Handle]*memory{},
		imports:   map[importKey]*memory{},
	}
}

// ErrClosed is the error of calls after Close (wraps sdk.ErrUnavailable).
func (rt *Runtime) ErrClosed() error { return rt.errClosed }

// untilClosed is ctx, cancelled with ErrClosed when Close starts, so that a
// running Load or PeerCopy stops between chunks. Call cancel when done.
func (rt *Runtime) untilClosed(ctx context.Context) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-rt.closing:
			cancel(rt.errClosed)
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// CheckOrdinal returns ErrNoSuchDevice for an ordinal the process does not
// see.
func (rt *Runtime) CheckOrdinal(ordinal int) error {
	if n := rt.drv.DeviceCount(); ordinal < 0 || ordinal >= n {
		return sdk.Errorf(sdk.ErrNoSuchDevice, "%s device ordinal %d: this process sees %d device(s)", rt.drv.Name(), ordinal, n)
	}
	return nil
}

// Worker returns the device's worker, starting it on first use (which
// runs Driver.Setup: on real hardware it creates the device's context).
// Starting holds only startMu, so work for devices already running is not
// held up.
func (rt *Runtime) Worker(ordinal int) (*Worker, error) {
	if err := rt.CheckOrdinal(ordinal); err != nil {
		return nil, err
	}
	if w, err := rt.existingWorker(ordinal); w != nil || err != nil {
		return w, err
	}
	rt.startMu.Lock()
	defer rt.startMu.Unlock()
	if w, err := rt.existingWorker(ordinal); w != nil || err != nil {
		return w, err
	}
	w := &Worker{Ordinal: ordinal}
	t, err := devthread.Start(func() error {
		var err error
		w.State, err = rt.drv.Setup(ordinal)
		return err
	}, func() error { return rt.drv.Cleanup(w) })
	if err != nil {
		return nil, fmt.Errorf("device %d: %w", ordinal, err)
	}
	w.thread = t
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return nil, errors.Join(rt.errClosed, t.Stop())
	}
	rt.workers[ordinal] = w
	rt.mu.Unlock()
	return w, nil
}

func (rt *Runtime) existingWorker(ordinal int) (*Worker, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return nil, rt.errClosed
	}
	return rt.workers[ordinal], nil
}

// RunningWorker returns the device's worker if it has started, else nil.
func (rt *Runtime) RunningWorker(ordinal int) *Worker {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.workers[ordinal]
}

// IsClosed reports whether Close has started.
func (rt *Runtime) IsClosed() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.closed
}

// Close stops running Loads (they fail with ErrUnavailable) and waits for
// them, frees every allocation and mapping still held and stops the
// device workers (Driver.Cleanup). After a fatal error (Driver.Fatal) it
// releases nothing on the device: every call would fail, and the process
// exit frees it all. Backends sharing the Runtime fail with ErrUnavailable
// afterwards. Close is idempotent.
func (rt *Runtime) Close() error {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return nil
	}
	rt.closed = true
	close(rt.closing)
	mems := make([]*memory, 0, len(rt.mems))
	for m := range rt.mems {
		mems = append(mems, m)
	}
	clear(rt.mems)
	clear(rt.exports)
	clear(rt.imports)
	workers := rt.workers
	rt.workers = map[int]*Worker{}
	rt.mu.Unlock()

	if rt.drv.Fatal() != nil {
		return nil
	}
	// Running Loads see closing between chunks and return after draining
	// their lanes; wait for them, so that no copy targets freed memory.
	for _, w := range workers {
		w.loadMu.Lock()
		defer w.loadMu.Unlock()
	}
	var errs []error
	for _, m := range mems {
		if w := workers[m.ordinal]; w != nil {
			errs = append(errs, rt.release(context.Background(), m, w))
		}
	}
	for _, w := range workers {
		errs = append(errs, w.thread.Stop())
	}
	return errors.Join(errs...)
}

// ParseHealthInterval parses the value v of the health-probe setting
// named name (see WatchHealth): a Go duration such as 5s, or 0 for no
// probe. Anything else, a negative duration included, is an error naming
// the setting.
func ParseHealthInterval(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if v == "0" {
		d, err = 0, nil
	}
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 5s, or 0 (off)", name, v)
	}
	return d, nil
}

// WatchHealth calls Driver.MemGetInfo on every running worker each
// interval until stop or fatal is closed or the Runtime closes. A daemon
// that only hands out handles makes no driver call of its own, so without
// the probe a GPU fault would go unnoticed until the next load or import;
// with it, the fatal error latches within an interval. Other errors are
// logged at debug level: a probe must not stop a healthy daemon.
func (rt *Runtime) WatchHealth(interval time.Duration, stop, fatal <-chan struct{}) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-rt.closing:
			return
		case <-fatal:
			return
		case <-t.C:
		}
		rt.mu.Lock()
		workers := make([]*Worker, 0, len(rt.workers))
		for _, w := range rt.workers {
			workers = append(workers, w)
		}
		rt.mu.Unlock()
		for _, w := range workers {
			ctx, cancel := context.WithTimeout(context.Background(), interval)
			err := w.Do(ctx, func() error {
				_, err := rt.drv.MemGetInfo()
				return err
			})
			cancel()
			if err != nil {
				rt.log.Debug("health probe failed", "ordinal", w.Ordinal, "error", err)
			}
		}
	}
}

// FreeMemory returns the free bytes of a device from its running worker;
// known is false when none runs (listing devices never starts one: a
// context costs device memory and, on an exclusive GPU, locks engines out).
func (rt *Runtime) FreeMemory(ctx context.Context, ordinal int) (free uint64, known bool, err error) {
	if rt.IsClosed() {
		return 0, false, rt.errClosed
	}
	w := rt.RunningWorker(ordinal)
	if w == nil {
		return 0, false, nil
	}
	err = w.Do(ctx, func() error {
		var err error
		free, err = rt.drv.MemGetInfo()
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("free memory of device %d: %w", ordinal, err)
	}
	return free, true, nil
}

// DeviceMemory returns a device's free and total bytes for Devices:
// monitor's (the vendor's management library: NVML, amdsmi) when it
// reports (ok and a total above 0), else the free bytes of a running
// worker (FreeMemory: 0 without one, meaning unknown) and total, the
// driver's figure. Free is never above total. monitor may be nil; after
// Close it is ErrClosed.
func (rt *Runtime) DeviceMemory(ctx context.Context, ordinal int, total uint64, monitor func() (free, total uint64, ok bool)) (uint64, uint64, error) {
	if rt.IsClosed() {
		return 0, 0, rt.errClosed
	}
	if monitor != nil {
		if f, t, ok := monitor(); ok && t > 0 {
			return min(f, t), t, nil
		}
	}
	free, _, err := rt.FreeMemory(ctx, ordinal)
	return min(free, total), total, err
}

// Worker is one device's thread: every Driver call marked "thread" runs
// there. State is what Driver.Setup returned; Lanes is the Driver's to
// keep the device's fill lanes in (made once, through LanesOnce: see
// LanePool).
type Worker struct {
	Ordinal   int
	State     any
	LanesOnce sync.Once
	Lanes     any

	thread *devthread.Thread
	// loadMu is held for reading by every running Load and for writing by
	// Close, which so waits for them.
	loadMu sync.RWMutex
}

// LanePool returns w.Lanes, which newPool makes on first use: the fill
// lanes of w's device, one per reader of s, with staging memory on the
// NUMA node sysfs (root) gives the device at PCI address busID (see
// staging.PlacerFor).
func (w *Worker) LanePool(s staging.Settings, root, busID string, log hclog.Logger, newPool func(readers int, place *staging.Placer) any) any {
	w.LanesOnce.Do(func() {
		readers := s.Lanes()
		place, node := staging.PlacerFor(root, busID, log.With("ordinal", w.Ordinal))
		log.Debug("fill lanes", "ordinal", w.Ordinal, "readers", readers, "numa_node", node)
		w.Lanes = newPool(readers, place)
	})
	return w.Lanes
}

// Do runs fn on the worker's thread (see devthread.Thread.Do).
func (w *Worker) Do(ctx context.Context, fn func() error) error { return w.thread.Do(ctx, fn) }

// Submit hands fn to the worker's thread (see devthread.Thread.Submit).
func (w *Worker) Submit(ctx context.Context, fn func() error) <-chan error {
	return w.thread.Submit(ctx, fn)
}
