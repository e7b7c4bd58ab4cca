package rocmbackend

import (
	"context"
	"time"
)

// watchHealth calls hipMemGetInfo on every device worker the runtime has,
// every interval, until stop is closed. A daemon that only hands out
// handles makes no HIP call of its own, so without the probe a GPU fault
// would go unnoticed until the next load or import; with it, a fatal
// error latches within an interval and Fatal closes. Other errors are
// logged at debug level: a probe must not stop a healthy daemon.
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
		rt.mu.Lock()
		workers := make([]*worker, 0, len(rt.workers))
		for _, w := range rt.workers {
			workers = append(workers, w)
		}
		rt.mu.Unlock()
		for _, w := range workers {
			ctx, cancel := context.WithTimeout(context.Background(), interval)
			err := w.thread.Do(ctx, func() error {
				_, _, err := rt.hip.MemGetInfo()
				return err
			})
			cancel()
			if err != nil {
				rt.log.Debug("health probe failed", "ordinal", w.ordinal, "error", err)
			}
		}
	}
}
