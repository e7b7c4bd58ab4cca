package bench

import (
	"context"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/test/testproc"
)

// serveRun is one `wcache serve` from fork/exec to ready, then stopped:
// the daemon's own phases (Status), the peak memory during the start and
// the memory once ready ("daemon", "plugin"), the plugin's page faults,
// the memory of the mock's allocations (the weights) and the share of the
// checkpoint in the page cache just before the start.
type serveRun struct {
	StartToReady time.Duration
	Phases       client.StartPhases
	Peak, Steady map[string]testproc.Memory
	PluginFaults testproc.Faults
	ShmFiles     uint64
	Resident     float64
}

// memorySampleInterval is how often memory is sampled during a load.
const memorySampleInterval = 5 * time.Millisecond

// serveOnce starts serve on m in a world of its own, waits until it is
// ready, measures and stops it. With cold the page cache is dropped first
// (an error when that is impossible).
func serveOnce(ctx context.Context, o Options, name string, m *Model, cold bool) (run serveRun, err error) {
	w, err := newWorld(o, name, m)
	if err != nil {
		return run, err
	}
	defer w.Close()
	if cold {
		if err := testproc.DropCaches(); err != nil {
			return run, err
		}
	}
	run.Resident = testproc.ResidentFraction(m.Files)
	var sampler *testproc.Sampler
	d, err := w.startServe(ctx, 0, func(pid int) { sampler = testproc.NewSampler(memorySampleInterval, pid) }, "--model", m.Dir)
	var peaks map[int]testproc.Memory
	if sampler != nil {
		peaks = sampler.Stop()
	}
	if err != nil {
		return run, err
	}
	run.StartToReady = d.StartToReady
	pluginPID, err := testproc.PluginPID(d.PID())
	if err == nil {
		run.PluginFaults, err = testproc.ReadFaults(pluginPID)
	}
	if err == nil {
		run.ShmFiles, err = w.ShmAllocated(d.PID(), pluginPID)
	}
	run.Peak, run.Steady = map[string]testproc.Memory{}, map[string]testproc.Memory{}
	for role, pid := range map[string]int{"daemon": d.PID(), "plugin": pluginPID} {
		run.Peak[role] = peaks[pid]
		if err == nil {
			run.Steady[role], err = testproc.ReadMemory(pid)
		}
	}
	if err == nil {
		run.Phases, err = w.loaded(ctx, d, m)
	}
	if err != nil {
		return run, err
	}
	return run, d.Stop()
}

// serveLaps are the times of serve runs by name: start_to_ready;
// overhead, start to ready minus the load; the start-up phases the daemons
// reported (client.StartPhases: plan, lock, allocate, load, export,
// daemon_total); and outside_daemon, start to ready minus the daemon's
// total: process and backend plugin start, and the ready file.
func serveLaps(runs []serveRun) laps {
	l := laps{}
	for _, r := range runs {
		p := r.Phases
		for k, d := range map[string]time.Duration{"start_to_ready": r.StartToReady, "overhead": r.StartToReady - p.Load,
			"plan": p.Plan, "lock": p.Lock, "allocate": p.Allocate, "load": p.Load, "export": p.Export,
			"daemon_total": p.Total, "outside_daemon": r.StartToReady - p.Total} {
			l[k] = append(l[k], d)
		}
	}
	return l
}
