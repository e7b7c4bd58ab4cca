package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/wcache/wcache/test/benchreport"
	"github.com/wcache/wcache/test/testproc"
)

// StartupCase is one checkpoint's serve runs, page cache warm (the docs
// template, "Start-up and footprint"): times as serveLaps names them;
// Steady and Peak (during the load) are the memory of "daemon" and
// "plugin", NonShared* their RssAnon+RssFile, maxima over runs.
type StartupCase struct {
	Model           Model                      `json:"model"`
	Steady          map[string]testproc.Memory `json:"steady"`
	Peak            map[string]testproc.Memory `json:"peak_during_load"`
	NonSharedSteady uint64                     `json:"non_shared_steady_bytes"`
	NonSharedPeak   uint64                     `json:"non_shared_peak_bytes"`
	ShmFiles        uint64                     `json:"shm_file_bytes"`
	benchreport.Figures
}

// StartupResult is the startup scenario's figures; PeakGrowth is the
// growth of NonSharedPeak per checkpoint byte from the small to the large
// case (0 when nothing grows with it).
type StartupResult struct {
	Cases      []StartupCase `json:"cases"`
	PeakGrowth float64       `json:"peak_growth_per_model_byte"`
}

// Targets of the startup scenario.
const (
	startupGoalMS    = 200
	footprintGoalMiB = 64
	peakGrowthGoal   = 0.01
)

// runStartup serves the small and the large checkpoint o.Repeats times
// each, page cache warm.
func runStartup(ctx context.Context, e *Env) (any, []Target, error) {
	res := &StartupResult{}
	var targets []Target
	for _, spec := range []ModelSpec{e.smallFew(), e.largeFew()} {
		m, err := e.warmModel(spec)
		if err != nil {
			return nil, nil, err
		}
		var runs []serveRun
		err = e.rounds(fmt.Sprintf("start-up, %d MiB", m.Bytes>>20), e.Repeats, func(int) (string, error) {
			r, err := serveOnce(ctx, e.Options, "startup", m, false)
			runs = append(runs, r)
			return fmt.Sprintf("ready in %s, load %s", r.StartToReady.Round(time.Millisecond), r.Phases.Load.Round(time.Millisecond)), err
		})
		if err != nil {
			return nil, nil, err
		}
		c := startupCase(m, runs)
		res.Cases = append(res.Cases, c)
		targets = append(targets,
			benchreport.AtMost(fmt.Sprintf("start to ready minus load, median, %d MiB", m.Bytes>>20), c.Times["overhead"].MedianMS, startupGoalMS, "ms"),
			benchreport.AtMost(fmt.Sprintf("daemon+plugin RssAnon+RssFile once ready, %d MiB", m.Bytes>>20),
				float64(c.NonSharedSteady)/(1<<20), footprintGoalMiB, "MiB"))
		if spec == e.largeFew() && m.Bytes > res.Cases[0].Model.Bytes {
			small := res.Cases[0]
			res.PeakGrowth = (float64(c.NonSharedPeak) - float64(small.NonSharedPeak)) / float64(m.Bytes-small.Model.Bytes)
			targets = append(targets, benchreport.AtMost(fmt.Sprintf("peak RssAnon+RssFile during load, growth per model byte, %d → %d MiB",
				small.Model.Bytes>>20, m.Bytes>>20), res.PeakGrowth, peakGrowthGoal, "B/B"))
		}
	}
	return res, targets, nil
}

// startupCase summarises serve runs of m.
func startupCase(m *Model, runs []serveRun) StartupCase {
	c := StartupCase{Model: *m, Steady: map[string]testproc.Memory{}, Peak: map[string]testproc.Memory{},
		Figures: benchreport.FiguresOf(serveLaps(runs), nil)}
	for _, r := range runs {
		var steady, peak uint64
		for _, role := range []string{"daemon", "plugin"} {
			c.Steady[role], c.Peak[role] = c.Steady[role].Max(r.Steady[role]), c.Peak[role].Max(r.Peak[role])
			steady, peak = steady+r.Steady[role].NonShared(), peak+r.Peak[role].NonShared()
		}
		c.NonSharedSteady, c.NonSharedPeak = max(c.NonSharedSteady, steady), max(c.NonSharedPeak, peak)
		c.ShmFiles = max(c.ShmFiles, r.ShmFiles)
	}
	return c
}
