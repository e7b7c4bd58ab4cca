package bench

import (
	"fmt"
	"slices"
)

// FootprintCase is row 5 for one checkpoint, over its serve runs: the
// largest value seen across runs.
type FootprintCase struct {
	Model Model `json:"model"`
	Runs  int   `json:"runs"`
	// Steady is the memory once ready; Peak the sampled peak from start to
	// ready (load included). Keys "daemon" and "plugin".
	Steady map[string]ProcMemory `json:"steady"`
	Peak   map[string]ProcMemory `json:"peak_during_load"`
	// NonSharedSteady is RssAnon+RssFile of daemon plus plugin once ready;
	// NonSharedPeak the same at the sampled peak during the load.
	NonSharedSteady uint64 `json:"non_shared_steady_bytes"`
	NonSharedPeak   uint64 `json:"non_shared_peak_bytes"`
	// ShmFiles is the memory held by the mock's shared-memory files once
	// ready (allocated blocks, largest over the runs): the cached weights,
	// whether or not the plugin's own mapping has touched them.
	ShmFiles uint64 `json:"shm_file_bytes"`
	Samples  int    `json:"samples"`
}

// LoadedFootprint is the daemon's memory after the concurrency run.
type LoadedFootprint struct {
	Daemon    ProcMemory `json:"daemon"`
	Plugin    ProcMemory `json:"plugin"`
	NonShared uint64     `json:"non_shared_bytes"`
	After     string     `json:"after"`
}

// FootprintResult is row 5.
type FootprintResult struct {
	Cases     []FootprintCase  `json:"cases"`
	AfterLoad *LoadedFootprint `json:"after_load,omitempty"`
	// PeakGrowth is NonSharedPeak(largest) − NonSharedPeak(smallest) over
	// the byte difference of the two checkpoints: 0 when nothing grows
	// with the model.
	PeakGrowth float64 `json:"peak_growth_per_model_byte"`
}

// Row 5 targets.
const (
	footprintGoalBytes = 64 << 20
	// peakGrowthGoal: peak memory beyond the arena may grow by at most 1%
	// of the model's size between the two sizes ("none proportional").
	peakGrowthGoal = 0.01
	footprintRowID = "5 footprint"
)

// footprintCase folds serve runs of m (maximum over runs of each field).
func footprintCase(m *Model, runs []serveRun) FootprintCase {
	c := FootprintCase{Model: *m, Runs: len(runs), Steady: map[string]ProcMemory{}, Peak: map[string]ProcMemory{}}
	for _, r := range runs {
		var steady, peak uint64
		for _, role := range []string{"daemon", "plugin"} {
			c.Steady[role] = maxMemory(c.Steady[role], r.Steady[role])
			c.Peak[role] = maxMemory(c.Peak[role], r.Peak[role])
			steady += r.Steady[role].NonShared()
			peak += r.Peak[role].RssAnon + r.Peak[role].RssFile
		}
		c.NonSharedSteady = max(c.NonSharedSteady, steady)
		c.NonSharedPeak = max(c.NonSharedPeak, peak)
		c.Samples += r.Samples
		c.ShmFiles = max(c.ShmFiles, r.ShmFiles)
	}
	return c
}

func maxMemory(a, b ProcMemory) ProcMemory {
	return ProcMemory{RssAnon: max(a.RssAnon, b.RssAnon), RssFile: max(a.RssFile, b.RssFile),
		RssShmem: max(a.RssShmem, b.RssShmem), VmHWM: max(a.VmHWM, b.VmHWM)}
}

// footprintChecks checks the steady footprint of every case (and after
// load) and the growth of the peak with model size.
func footprintChecks(r *FootprintResult) []Check {
	var out []Check
	slices.SortFunc(r.Cases, func(a, b FootprintCase) int { return int(int64(a.Model.Bytes>>20) - int64(b.Model.Bytes>>20)) })
	for _, c := range r.Cases {
		out = append(out, atMost(keyFootSteady, footprintRowID, fmt.Sprintf("daemon+plugin RssAnon+RssFile once ready, %d MiB model", c.Model.Bytes>>20),
			float64(c.NonSharedSteady)/(1<<20), footprintGoalBytes>>20, "MiB"))
	}
	if r.AfterLoad != nil {
		out = append(out, atMost(keyFootSteady, footprintRowID, "daemon+plugin RssAnon+RssFile "+r.AfterLoad.After,
			float64(r.AfterLoad.NonShared)/(1<<20), footprintGoalBytes>>20, "MiB"))
	}
	if n := len(r.Cases); n >= 2 {
		small, large := r.Cases[0], r.Cases[n-1]
		if large.Model.Bytes > small.Model.Bytes {
			growth := (float64(large.NonSharedPeak) - float64(small.NonSharedPeak)) / float64(large.Model.Bytes-small.Model.Bytes)
			r.PeakGrowth = round3(growth)
			c := atMost(keyFootGrowth, footprintRowID, fmt.Sprintf("peak RssAnon+RssFile during load: growth per model byte, %d → %d MiB",
				small.Model.Bytes>>20, large.Model.Bytes>>20), growth, peakGrowthGoal, "B/B")
			out = append(out, c)
		}
	}
	return out
}
