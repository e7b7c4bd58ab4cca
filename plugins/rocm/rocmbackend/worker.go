package rocmbackend

import (
	"fmt"
	"sync"

	"github.com/wcache/wcache/plugins/internal/devthread"
	"github.com/wcache/wcache/plugins/internal/lanepool"
	"github.com/wcache/wcache/plugins/internal/staging"
)

// worker runs every device call of one device on one OS thread (a
// devthread.Thread) where hipSetDevice made the device current, which
// creates its primary context: a worker starts only when a device is
// first used for memory, never to list devices.
type worker struct {
	ordinal int
	thread  *devthread.Thread

	// loadMu is held for reading by every running Load and for writing by
	// Close, which so waits for them.
	loadMu sync.RWMutex

	// lanes are the device's fill lanes, made on the first Load and freed
	// when the thread stops.
	lanesOnce sync.Once
	lanes     *lanepool.Pool[*lane]
}

// startWorker starts the device's thread and makes the device current.
func startWorker(rt *Runtime, ordinal int) (*worker, error) {
	w := &worker{ordinal: ordinal}
	t, err := devthread.Start(func() error { return rt.hip.SetDevice(ordinal) }, func() error {
		if w.lanes != nil {
			return w.lanes.Free()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("device %d: %w", ordinal, err)
	}
	w.thread = t
	return w, nil
}

// lanePool returns the device's fill lanes, making the pool on first use:
// as many lanes as readers, staging memory on the GPU's NUMA node when
// sysfs names one.
func (rt *Runtime) lanePool(w *worker) *lanepool.Pool[*lane] {
	w.lanesOnce.Do(func() {
		node := -1
		if d, err := rt.device(w.ordinal); err == nil {
			n, ok, err := staging.NUMANode(rt.cfg.SysfsRoot, d.pciBusID)
			switch {
			case err != nil:
				rt.log.Warn("NUMA node of the GPU unknown; staging memory is not placed", "ordinal", w.ordinal, "error", err)
			case ok:
				node = n
			}
		}
		readers := rt.cfg.Staging.Lanes()
		rt.log.Debug("fill lanes", "ordinal", w.ordinal, "readers", readers, "numa_node", node)
		w.lanes = newLanePool(rt.hip, readers, staging.NewPlacer(node, rt.log), rt.log)
	})
	return w.lanes
}
