package bench

import (
	"context"
	"fmt"
	"time"
)

// StartupCase is row 6 for one checkpoint.
type StartupCase struct {
	Model        Model   `json:"model"`
	Runs         int     `json:"runs"`
	StartToReady Summary `json:"start_to_ready"`
	Load         Summary `json:"load"`
	// Overhead is start-to-ready minus the load, per run.
	Overhead Summary `json:"overhead"`
	// PhasesMS are the medians of the approximate phases (see serveRun).
	PhasesMS map[string]float64 `json:"phases_ms"`
	// MockAllocate is the mock backend's Allocate of the checkpoint's
	// arenas, timed in-process in the same run (the code the plugin runs,
	// which start-up includes). OverheadLessAllocMS is the overhead median
	// minus its median: what is left for plugin start, planning, export,
	// listening.
	MockAllocate        Summary `json:"mock_allocate"`
	OverheadLessAllocMS float64 `json:"overhead_less_alloc_ms"`
}

// StartupResult is row 6.
type StartupResult struct {
	Cases []StartupCase `json:"cases"`
}

// Row 6 target.
const (
	startupGoalMS = 200
	startupRowID  = "6 start-up"
)

// runStartupSeries serves m o.Repeats times, page cache warm, for rows 5
// and 6, each run followed by a timing of the mock's Allocate of the same
// arenas in-process.
func runStartupSeries(ctx context.Context, o Options, m *Model) ([]serveRun, Summary, error) {
	if _, _, err := sequentialRead(m.Files); err != nil {
		return nil, Summary{}, err
	}
	sizes, err := arenaSizes(m)
	if err != nil {
		return nil, Summary{}, err
	}
	var runs []serveRun
	var allocs []time.Duration
	for i := range o.Repeats {
		r, err := serveOnce(ctx, o, "startup", m, false)
		if err != nil {
			return nil, Summary{}, fmt.Errorf("start-up run %d: %w", i+1, err)
		}
		runs = append(runs, r)
		alloc, err := mockAllocate(ctx, o, sizes)
		if err != nil {
			return nil, Summary{}, err
		}
		allocs = append(allocs, alloc)
		o.logf("start-up %d/%d (%d MiB): ready in %s, load %s", i+1, o.Repeats, m.Bytes>>20,
			r.StartToReady.Round(time.Millisecond), r.Load)
	}
	return runs, Summarize(allocs), nil
}

// startupCase summarises serve runs of m; alloc is the mock's Allocate of
// the same arenas, timed in-process.
func startupCase(m *Model, runs []serveRun, alloc Summary) StartupCase {
	var ready, load, over []time.Duration
	phases := map[string][]time.Duration{}
	for _, r := range runs {
		ready, load = append(ready, r.StartToReady), append(load, r.Load)
		over = append(over, r.StartToReady-r.Load)
		for k, v := range r.Phases {
			phases[k] = append(phases[k], v)
		}
	}
	c := StartupCase{Model: *m, Runs: len(runs), StartToReady: Summarize(ready), Load: Summarize(load),
		Overhead: Summarize(over), PhasesMS: map[string]float64{}}
	for k, v := range phases {
		c.PhasesMS[k] = round3(Summarize(v).MedianMS)
	}
	c.MockAllocate = alloc
	c.OverheadLessAllocMS = round3(c.Overhead.MedianMS - alloc.MedianMS)
	return c
}

// startupChecks checks the overhead of every case.
func startupChecks(r *StartupResult) []Check {
	var out []Check
	for _, c := range r.Cases {
		out = append(out, atMost(keyStartup, startupRowID, fmt.Sprintf("start to ready minus load, median, %d MiB", c.Model.Bytes>>20),
			c.Overhead.MedianMS, startupGoalMS, "ms"))
	}
	return out
}
