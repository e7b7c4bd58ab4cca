package bench

import (
	"context"
	"fmt"
	"time"
)

// FillVariant is the fill rate under one page-cache condition.
type FillVariant struct {
	Condition string `json:"condition"`
	Runs      int    `json:"runs"`
	// DaemonGiBps is the median of the daemon's own rate (bytes loaded /
	// its reported load time); DaemonLoad its load times.
	DaemonGiBps float64 `json:"daemon_gib_per_s"`
	DaemonLoad  Summary `json:"daemon_load"`
	// SeqReadGiBps: a plain sequential read of the same files (8 MiB
	// buffer) under the same condition. MemcpyGiBps: a memcpy of the same
	// byte count between prefaulted buffers (warm only). ArenaReadGiBps:
	// one thread preading the files into a freshly fallocated, mapped
	// shared-memory file, i.e. the mock's own situation; ArenaParallelGiBps
	// the same with the mock's workers and chunking (both informational:
	// they locate the cost). ArenaAlloc is that fallocate (warm runs).
	SeqReadGiBps       float64 `json:"seq_read_gib_per_s"`
	MemcpyGiBps        float64 `json:"memcpy_gib_per_s,omitempty"`
	ArenaReadGiBps     float64 `json:"arena_read_gib_per_s"`
	ArenaParallelGiBps float64 `json:"arena_parallel_gib_per_s"`
	Workers            int     `json:"workers"`
	ArenaAlloc         Summary `json:"arena_alloc"`
	// PluginMinorFaults and PluginMajorFaults are the plugin's page
	// faults from its start to ready (median), PagesLoaded the 4 KiB pages
	// of the checkpoint.
	PluginMinorFaults uint64 `json:"plugin_minor_faults"`
	PluginMajorFaults uint64 `json:"plugin_major_faults"`
	PagesLoaded       uint64 `json:"pages_loaded"`
	// Ratio is DaemonGiBps over the slower of SeqReadGiBps and MemcpyGiBps
	// (SeqReadGiBps alone when cold).
	Ratio float64 `json:"ratio"`
	// Resident is the median share of the checkpoint's pages in the page
	// cache right before the daemon started.
	Resident float64 `json:"resident_before"`
	// Samples are every run's rate in GiB/s, by figure: "daemon",
	// "seq_read", "memcpy", "arena_1", "arena_parallel".
	Samples map[string][]float64 `json:"samples_gib_per_s"`
}

// FillResult is row 3.
type FillResult struct {
	Model Model        `json:"model"`
	Warm  FillVariant  `json:"warm"`
	Cold  *FillVariant `json:"cold,omitempty"`
	// ColdNote says why cold was not measured, or what limits it.
	ColdNote string `json:"cold_note"`
	// ODirect says whether an O_DIRECT cold fill was measured.
	ODirect string `json:"o_direct"`
}

// Row 3 target.
const (
	fillRatioGoal = 0.8
	fillRowID     = "3 fill"
	// maxColdRuns bounds cold runs: each reads the whole checkpoint from disk.
	maxColdRuns = 3
	oDirectNote = "cold with O_DIRECT: not measured — the mock backend reads through the page cache (no O_DIRECT mode)"
)

// gibps is bytes per second in GiB/s.
func gibps(bytes uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / float64(1<<30) / d.Seconds()
}

// runFill measures row 3 on model: serve runs interleaved with the
// baselines, page-cache warm, then cold (page cache dropped before each
// daemon run and each baseline read). The serve runs are returned for the
// footprint and start-up rows.
func runFill(ctx context.Context, o Options, m *Model) (*FillResult, []serveRun, []Check, error) {
	res := &FillResult{Model: *m, ODirect: oDirectNote}
	// Warm the page cache and the binaries once, untimed.
	if _, _, err := sequentialRead(m.Files); err != nil {
		return nil, nil, nil, err
	}
	var runs []serveRun
	var daemonRates, seqRates, copyRates, arenaRates, parRates, resident []float64
	var loads, allocs []time.Duration
	for i := range o.Repeats {
		r, err := serveOnce(ctx, o, "fill", m, false)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("fill warm run %d: %w", i+1, err)
		}
		runs = append(runs, r)
		loads = append(loads, r.Load)
		daemonRates = append(daemonRates, gibps(r.LoadBytes, r.Load))
		resident = append(resident, r.Resident)
		n, took, err := sequentialRead(m.Files)
		if err != nil {
			return nil, nil, nil, err
		}
		seqRates = append(seqRates, gibps(n, took))
		copyRates = append(copyRates, gibps(m.Bytes, memcpy(m.Bytes)))
		ab, alloc, took, err := arenaRead(o.ShmDir, m.Files, 1)
		if err != nil {
			return nil, nil, nil, err
		}
		arenaRates, allocs = append(arenaRates, gibps(ab, took)), append(allocs, alloc)
		ab, _, took, err = arenaRead(o.ShmDir, m.Files, mockLoadWorkers())
		if err != nil {
			return nil, nil, nil, err
		}
		parRates = append(parRates, gibps(ab, took))
		o.logf("fill warm %d/%d: daemon %.2f GiB/s, read %.2f GiB/s, memcpy %.2f GiB/s, into fresh arena %.2f GiB/s (1 thread), %.2f GiB/s (%d)",
			i+1, o.Repeats, daemonRates[i], seqRates[i], copyRates[i], arenaRates[i], parRates[i], mockLoadWorkers())
	}
	res.Warm = FillVariant{Condition: "page cache warm", Runs: len(loads), DaemonGiBps: round3(MedianFloat(daemonRates)),
		DaemonLoad: Summarize(loads), SeqReadGiBps: round3(MedianFloat(seqRates)),
		MemcpyGiBps: round3(MedianFloat(copyRates)), ArenaReadGiBps: round3(MedianFloat(arenaRates)),
		ArenaParallelGiBps: round3(MedianFloat(parRates)), Workers: mockLoadWorkers(),
		ArenaAlloc: Summarize(allocs), Resident: MedianFloat(resident), PagesLoaded: m.Bytes / pageSize,
		Samples: rateSamples(daemonRates, seqRates, copyRates, arenaRates, parRates)}
	res.Warm.PluginMinorFaults, res.Warm.PluginMajorFaults = medianFaults(runs)
	res.Warm.Ratio = round3(ratio(res.Warm.DaemonGiBps, min(res.Warm.SeqReadGiBps, res.Warm.MemcpyGiBps)))
	checks := []Check{atLeast(keyFillWarm, fillRowID, "daemon fill / slower of (read, memcpy), page cache warm", res.Warm.Ratio, fillRatioGoal, "×")}

	switch {
	case !o.Cold:
		res.ColdNote = "cold: not measured — disabled with -cold=false"
	case onTmpfs(m.Dir):
		res.ColdNote = fmt.Sprintf("cold: not measured — the checkpoint lives on tmpfs (%s), which no cache drop makes cold", m.Dir)
	default:
		cold, err := fillCold(ctx, o, m)
		if err != nil {
			res.ColdNote = fmt.Sprintf("cold: not measured — %v", err)
			break
		}
		res.Cold = cold
		res.ColdNote = "cold: page cache dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before every daemon run and every baseline read"
		checks = append(checks, atLeast(keyFillCold, fillRowID, "daemon fill / sequential read, page cache cold", cold.Ratio, fillRatioGoal, "×"))
	}
	return res, runs, checks, nil
}

// fillCold alternates cold daemon runs and cold baseline reads, the page
// cache dropped before each.
func fillCold(ctx context.Context, o Options, m *Model) (*FillVariant, error) {
	var daemonRates, seqRates, arenaRates, parRates, resident []float64
	var loads []time.Duration
	var runs []serveRun
	n := min(o.Repeats, maxColdRuns)
	for i := range n {
		r, err := serveOnce(ctx, o, "fillcold", m, true)
		if err != nil {
			return nil, fmt.Errorf("cold run %d: %w", i+1, err)
		}
		runs = append(runs, r)
		loads = append(loads, r.Load)
		daemonRates = append(daemonRates, gibps(r.LoadBytes, r.Load))
		resident = append(resident, r.Resident)
		if err := dropCaches(); err != nil {
			return nil, err
		}
		b, took, err := sequentialRead(m.Files)
		if err != nil {
			return nil, err
		}
		seqRates = append(seqRates, gibps(b, took))
		for _, workers := range []int{1, mockLoadWorkers()} {
			if err := dropCaches(); err != nil {
				return nil, err
			}
			ab, _, took, err := arenaRead(o.ShmDir, m.Files, workers)
			if err != nil {
				return nil, err
			}
			if workers == 1 {
				arenaRates = append(arenaRates, gibps(ab, took))
			} else {
				parRates = append(parRates, gibps(ab, took))
			}
		}
		o.logf("fill cold %d/%d: daemon %.2f GiB/s (%.0f%% resident before), read %.2f GiB/s, into fresh arena %.2f GiB/s (1 thread), %.2f GiB/s (%d)",
			i+1, n, daemonRates[i], 100*r.Resident, seqRates[i], arenaRates[i], parRates[i], mockLoadWorkers())
	}
	v := &FillVariant{Condition: "page cache cold", Runs: n, DaemonGiBps: round3(MedianFloat(daemonRates)),
		DaemonLoad: Summarize(loads), SeqReadGiBps: round3(MedianFloat(seqRates)), Resident: MedianFloat(resident),
		ArenaReadGiBps: round3(MedianFloat(arenaRates)), ArenaParallelGiBps: round3(MedianFloat(parRates)),
		Workers: mockLoadWorkers(), PagesLoaded: m.Bytes / pageSize,
		Samples: rateSamples(daemonRates, seqRates, nil, arenaRates, parRates)}
	v.PluginMinorFaults, v.PluginMajorFaults = medianFaults(runs)
	v.Ratio = round3(ratio(v.DaemonGiBps, v.SeqReadGiBps))
	return v, nil
}

// medianFaults is the median of the plugin's fault counts over runs.
func medianFaults(runs []serveRun) (minor, major uint64) {
	var mi, ma []float64
	for _, r := range runs {
		mi, ma = append(mi, float64(r.PluginFaults.Minor)), append(ma, float64(r.PluginFaults.Major))
	}
	return uint64(MedianFloat(mi)), uint64(MedianFloat(ma))
}

// rateSamples keys the per-run rates (rounded) by figure; nil series are
// left out.
func rateSamples(daemon, seq, memcpy, arena1, arenaPar []float64) map[string][]float64 {
	out := map[string][]float64{}
	for k, v := range map[string][]float64{"daemon": daemon, "seq_read": seq, "memcpy": memcpy, "arena_1": arena1,
		"arena_parallel": arenaPar} {
		if v == nil {
			continue
		}
		r := make([]float64, len(v))
		for i, x := range v {
			r[i] = round3(x)
		}
		out[k] = r
	}
	return out
}
