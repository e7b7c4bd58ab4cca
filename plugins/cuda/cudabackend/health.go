package cudabackend

import (
	"context"
	"time"
)

// DefaultHealthInterval is how often watchHealth probes each device that
// holds a context (WCACHE_CUDA_HEALTH_INTERVAL overrides it; 0 turns the
// probe off).
const DefaultHealthInterval = 5 * time.Second

// watchHealth calls cuMemGetInfo in every device context the runtime holds,
// every interval, until stop is closed. A daemon that only hands out
// handles makes no driver call of its own, so without the probe a GPU fault
// (an Xid that leaves the context with a sticky error) would go unnoticed
// until the next load or import; with it, the sticky error latches within
// an interval and Fatal closes (see exitOnFatal). Other errors are logged
// at debug level and otherwise ignored: a probe must not stop a healthy
// daemon.
func (rt *Runtime) watchHealth(interval time.Duration, stop <-chan struct{}) {
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
		case <-rt.Fatal():
			return
		case <-t.C:
		}
		rt.probe(interval)
	}
}

// probe runs one cuMemGetInfo on each started device worker, giving each
// at most timeout to take the job (a worker busy with a long call is
// healthy enough; the next tick tries again).
func (rt *Runtime) probe(timeout time.Duration) {
	rt.mu.Lock()
	workers := make([]*worker, 0, len(rt.workers))
	for _, w := range rt.workers {
		workers = append(workers, w)
	}
	rt.mu.Unlock()
	for _, w := range workers {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := w.do(ctx, func() error {
			_, _, err := rt.drv.MemGetInfo()
			return err
		})
		cancel()
		if err != nil {
			rt.log.Debug("health probe failed", "ordinal", w.ordinal, "error", err)
		}
	}
}
