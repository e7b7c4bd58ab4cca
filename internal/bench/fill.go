package bench

import (
	"context"
	"fmt"
	"time"
)

// Probe is one way of filling fresh shared memory without wcache,
// measured in the same run as the daemon (see freshshm.go).
type Probe struct {
	Runs int `json:"runs"`
	// Allocate is creating, sizing (reserving, for the previous pattern)
	// and mapping the file; Fill the copy.
	Allocate Summary `json:"allocate"`
	Fill     Summary `json:"fill"`
	// FillGiBps is the median over runs of bytes / Fill, EndToEndGiBps of
	// bytes / (Allocate + Fill).
	FillGiBps     float64 `json:"fill_gib_per_s"`
	EndToEndGiBps float64 `json:"end_to_end_gib_per_s"`
	// MinorFaultsPerPage is the median over runs of the harness's minor
	// page faults during the fill per 4 KiB page filled.
	MinorFaultsPerPage float64 `json:"minor_faults_per_page"`
}

// probeSeries collects the runs of one probe.
type probeSeries struct {
	alloc, fill                 []time.Duration
	fillRates, endRates, faults []float64
}

func (s *probeSeries) add(t fillTiming) {
	s.alloc, s.fill = append(s.alloc, t.Alloc), append(s.fill, t.Fill)
	s.fillRates = append(s.fillRates, gibps(t.Bytes, t.Fill))
	s.endRates = append(s.endRates, gibps(t.Bytes, t.Alloc+t.Fill))
	s.faults = append(s.faults, float64(t.MinorFaults)/float64(max(t.Bytes/pageSize, 1)))
}

// probe summarises the series (nil when it has no run).
func (s *probeSeries) probe() *Probe {
	if len(s.fill) == 0 {
		return nil
	}
	return &Probe{Runs: len(s.fill), Allocate: Summarize(s.alloc), Fill: Summarize(s.fill),
		FillGiBps: round3(MedianFloat(s.fillRates)), EndToEndGiBps: round3(MedianFloat(s.endRates)),
		MinorFaultsPerPage: round3(MedianFloat(s.faults))}
}

// FillVariant is the fill rate under one page-cache condition.
type FillVariant struct {
	Condition string `json:"condition"`
	Runs      int    `json:"runs"`
	// DaemonGiBps is the median of the daemon's own rate (bytes loaded /
	// its reported load time: the Backend.Load calls, allocation
	// excluded); DaemonLoad its load times.
	DaemonGiBps float64 `json:"daemon_gib_per_s"`
	DaemonLoad  Summary `json:"daemon_load"`
	// DaemonEndToEnd is, per run, the time from the daemon taking the
	// device's identity lock to its ready file — allocate, load, export,
	// listen — from serve's debug log (millisecond timestamps); its rate
	// the bytes loaded over it (median of runs). It is the daemon's own
	// Allocate + Load, export and listening included.
	DaemonEndToEnd      Summary `json:"daemon_end_to_end"`
	DaemonEndToEndGiBps float64 `json:"daemon_end_to_end_gib_per_s"`
	// SeqReadGiBps: a plain sequential read of the same files (8 MiB
	// buffer) under the same condition. MemcpyGiBps: a memcpy of the same
	// byte count between two prefaulted 64 MiB buffers, one core (warm
	// only). These two are the target's baselines; neither allocates the
	// memory it writes.
	SeqReadGiBps float64 `json:"seq_read_gib_per_s"`
	MemcpyGiBps  float64 `json:"memcpy_gib_per_s,omitempty"`
	// MockPattern is the mock's fill without wcache: ftruncate + mmap of a
	// new file in the same shared-memory file system, then the mock's
	// workers and chunks, pread into a reused 1 MiB buffer and pwrite at
	// the destination. Measured right after each daemon run.
	MockPattern *Probe `json:"mock_pattern"`
	// PreviousPattern is the mock's fill before commit 1af0940
	// (fallocate at allocation, pread into the mapping), a second
	// reference (warm only).
	PreviousPattern *Probe `json:"previous_pattern,omitempty"`
	// FreshMemcpy is a memcpy of the same byte count into the mapping of
	// a new sparse file (every page allocated on first write), no file
	// read; FreshWrite pwrites a cached 1 MiB buffer over a new sparse
	// file, AllocatedWrite the same again over that file once its pages
	// exist. All with the mock's workers (warm only).
	FreshMemcpy    *Probe `json:"fresh_memcpy,omitempty"`
	FreshWrite     *Probe `json:"fresh_write,omitempty"`
	AllocatedWrite *Probe `json:"allocated_write,omitempty"`
	// PageAllocUS is the median over runs of (FreshWrite − AllocatedWrite
	// fill time) per 4 KiB page, in µs of wall time with the mock's
	// workers: what allocating a page of shared memory costs the fill.
	PageAllocUS float64 `json:"page_alloc_us,omitempty"`
	// MockAllocate is the mock backend's Allocate of the plan's arenas,
	// timed in-process once per run (warm only).
	MockAllocate Summary `json:"mock_allocate"`
	Workers      int     `json:"workers"`
	// PluginMinorFaults and PluginMajorFaults are the plugin's page
	// faults from its start to ready (median), PagesLoaded the 4 KiB pages
	// of the checkpoint.
	PluginMinorFaults uint64 `json:"plugin_minor_faults"`
	PluginMajorFaults uint64 `json:"plugin_major_faults"`
	PagesLoaded       uint64 `json:"pages_loaded"`
	// Ratio is DaemonGiBps over the slower of SeqReadGiBps and MemcpyGiBps
	// (SeqReadGiBps alone when cold): the target's figure.
	// EndToEndRatio is DaemonEndToEndGiBps over SeqReadGiBps.
	Ratio         float64 `json:"ratio"`
	EndToEndRatio float64 `json:"end_to_end_ratio"`
	// Resident is the median share of the checkpoint's pages in the page
	// cache right before the daemon started.
	Resident float64 `json:"resident_before"`
	// Samples are every run's rate in GiB/s, by figure (see sampleKeys).
	Samples map[string][]float64 `json:"samples_gib_per_s"`
}

// Keys of FillVariant.Samples.
const (
	sampleDaemon         = "daemon"
	sampleDaemonEnd      = "daemon_end_to_end"
	sampleSeqRead        = "seq_read"
	sampleMemcpy         = "memcpy"
	samplePattern        = "mock_pattern"
	samplePatternEnd     = "mock_pattern_end_to_end"
	samplePrevious       = "previous_pattern"
	samplePreviousEnd    = "previous_pattern_end_to_end"
	sampleFreshMemcpy    = "fresh_memcpy"
	sampleFreshWrite     = "fresh_write"
	sampleAllocatedWrite = "allocated_write"
)

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

// fillSeries collects the runs of one condition.
type fillSeries struct {
	runs                                                []serveRun
	loads, ends, allocs                                 []time.Duration
	daemon, daemonEnd, seq, copies, resident, pageCost  []float64
	pattern, previous, freshCopy, freshWrite, overWrite probeSeries
}

// addDaemon records a serve run.
func (s *fillSeries) addDaemon(r serveRun) {
	s.runs, s.loads = append(s.runs, r), append(s.loads, r.Load)
	s.daemon = append(s.daemon, gibps(r.LoadBytes, r.Load))
	s.resident = append(s.resident, r.Resident)
	if rest, ok := r.Phases[phaseRest]; ok {
		s.ends = append(s.ends, r.Load+rest)
		s.daemonEnd = append(s.daemonEnd, gibps(r.LoadBytes, r.Load+rest))
	}
}

// addWrites records a freshWrite pair.
func (s *fillSeries) addWrites(fresh, over fillTiming) {
	s.freshWrite.add(fresh)
	s.overWrite.add(over)
	if pages := fresh.Bytes / pageSize; pages > 0 {
		s.pageCost = append(s.pageCost, float64(fresh.Fill-over.Fill)/float64(time.Microsecond)/float64(pages))
	}
}

// variant summarises the series.
func (s *fillSeries) variant(condition string, workers int, m *Model) FillVariant {
	v := FillVariant{Condition: condition, Runs: len(s.runs), DaemonGiBps: round3(MedianFloat(s.daemon)),
		DaemonLoad: Summarize(s.loads), DaemonEndToEnd: Summarize(s.ends),
		DaemonEndToEndGiBps: round3(MedianFloat(s.daemonEnd)), SeqReadGiBps: round3(MedianFloat(s.seq)),
		MemcpyGiBps: round3(MedianFloat(s.copies)), MockPattern: s.pattern.probe(), PreviousPattern: s.previous.probe(),
		FreshMemcpy: s.freshCopy.probe(), FreshWrite: s.freshWrite.probe(), AllocatedWrite: s.overWrite.probe(),
		PageAllocUS: round3(MedianFloat(s.pageCost)), MockAllocate: Summarize(s.allocs), Workers: workers,
		PagesLoaded: m.Bytes / pageSize, Resident: MedianFloat(s.resident)}
	v.PluginMinorFaults, v.PluginMajorFaults = medianFaults(s.runs)
	baseline := v.SeqReadGiBps
	if v.MemcpyGiBps > 0 {
		baseline = min(baseline, v.MemcpyGiBps)
	}
	v.Ratio = round3(ratio(v.DaemonGiBps, baseline))
	v.EndToEndRatio = round3(ratio(v.DaemonEndToEndGiBps, v.SeqReadGiBps))
	v.Samples = rateSamples(map[string][]float64{sampleDaemon: s.daemon, sampleDaemonEnd: s.daemonEnd,
		sampleSeqRead: s.seq, sampleMemcpy: s.copies, samplePattern: s.pattern.fillRates,
		samplePatternEnd: s.pattern.endRates, samplePrevious: s.previous.fillRates,
		samplePreviousEnd: s.previous.endRates, sampleFreshMemcpy: s.freshCopy.fillRates,
		sampleFreshWrite: s.freshWrite.fillRates, sampleAllocatedWrite: s.overWrite.fillRates})
	return v
}

// runFill measures row 3 on model: serve runs interleaved with the
// baselines, page-cache warm, then cold (page cache dropped before each
// daemon run and each baseline read). Right after each daemon run comes
// the mock's pattern without wcache, then the target's baselines and the
// probes that locate the cost. The serve runs are returned for the
// footprint and start-up rows.
func runFill(ctx context.Context, o Options, m *Model) (*FillResult, []serveRun, []Check, error) {
	res := &FillResult{Model: *m, ODirect: oDirectNote}
	sizes, err := arenaSizes(m)
	if err != nil {
		return nil, nil, nil, err
	}
	// Warm the page cache and the binaries once, untimed.
	if _, _, err := sequentialRead(m.Files); err != nil {
		return nil, nil, nil, err
	}
	workers := mockLoadWorkers()
	var s fillSeries
	for i := range o.Repeats {
		if err := fillWarmRound(ctx, o, m, sizes, workers, &s); err != nil {
			return nil, nil, nil, fmt.Errorf("fill warm run %d: %w", i+1, err)
		}
		o.logf("fill warm %d/%d: daemon load %.2f GiB/s, mock pattern %.2f GiB/s, read %.2f GiB/s, memcpy %.2f GiB/s, "+
			"memcpy into fresh shm %.2f GiB/s, pwrite fresh %.2f / allocated %.2f GiB/s, previous pattern %.2f GiB/s "+
			"(%s fallocate), mock Allocate %s",
			i+1, o.Repeats, s.daemon[i], s.pattern.fillRates[i], s.seq[i], s.copies[i], s.freshCopy.fillRates[i],
			s.freshWrite.fillRates[i], s.overWrite.fillRates[i], s.previous.fillRates[i],
			s.previous.alloc[i].Round(time.Millisecond), s.allocs[i])
	}
	res.Warm = s.variant("page cache warm", workers, m)

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
	}
	return res, s.runs, fillChecks(res), nil
}

// fillWarmRound is one warm round: the daemon, the mock's pattern right
// after it, the target's baselines, then the probes.
func fillWarmRound(ctx context.Context, o Options, m *Model, sizes []uint64, workers int, s *fillSeries) error {
	r, err := serveOnce(ctx, o, "fill", m, false)
	if err != nil {
		return err
	}
	s.addDaemon(r)
	pat, err := mockPattern(o.ShmDir, m.Files, workers)
	if err != nil {
		return err
	}
	s.pattern.add(pat)
	n, took, err := sequentialRead(m.Files)
	if err != nil {
		return err
	}
	s.seq = append(s.seq, gibps(n, took))
	s.copies = append(s.copies, gibps(m.Bytes, memcpy(m.Bytes)))
	fm, err := freshMemcpy(o.ShmDir, int64(pat.Bytes), workers)
	if err != nil {
		return err
	}
	s.freshCopy.add(fm)
	fresh, over, err := freshWrite(o.ShmDir, int64(pat.Bytes), workers)
	if err != nil {
		return err
	}
	s.addWrites(fresh, over)
	prev, err := previousPattern(o.ShmDir, m.Files, workers)
	if err != nil {
		return err
	}
	s.previous.add(prev)
	alloc, err := mockAllocate(ctx, o, sizes)
	if err != nil {
		return err
	}
	s.allocs = append(s.allocs, alloc)
	return nil
}

// fillChecks are row 3's targets and the figures reported beside them.
func fillChecks(res *FillResult) []Check {
	w := res.Warm
	checks := []Check{atLeast(keyFillWarm, fillRowID, "daemon fill / slower of (read, memcpy), page cache warm", w.Ratio, fillRatioGoal, "×")}
	if c := res.Cold; c != nil {
		checks = append(checks, atLeast(keyFillCold, fillRowID, "daemon fill / sequential read, page cache cold", c.Ratio, fillRatioGoal, "×"))
	}
	if w.FreshMemcpy != nil {
		checks = append(checks, reported(fillRowID, "daemon fill / memcpy into fresh shared memory of the same size, page cache warm",
			ratio(w.DaemonGiBps, w.FreshMemcpy.FillGiBps), "×"))
	}
	if w.MockPattern != nil {
		checks = append(checks, reported(fillRowID, "daemon fill / the mock's pattern without wcache (same run), page cache warm",
			ratio(w.DaemonGiBps, w.MockPattern.FillGiBps), "×"))
	}
	if w.DaemonEndToEndGiBps > 0 {
		checks = append(checks, reported(fillRowID, "daemon allocate + load (lock → ready) / sequential read, page cache warm",
			w.EndToEndRatio, "×"))
	}
	if c := res.Cold; c != nil && c.DaemonEndToEndGiBps > 0 {
		checks = append(checks, reported(fillRowID, "daemon allocate + load (lock → ready) / sequential read, page cache cold",
			c.EndToEndRatio, "×"))
	}
	return checks
}

// fillCold alternates cold daemon runs, cold sequential reads and cold
// runs of the mock's pattern, the page cache dropped before each.
func fillCold(ctx context.Context, o Options, m *Model) (*FillVariant, error) {
	var s fillSeries
	n := min(o.Repeats, maxColdRuns)
	workers := mockLoadWorkers()
	for i := range n {
		r, err := serveOnce(ctx, o, "fillcold", m, true)
		if err != nil {
			return nil, fmt.Errorf("cold run %d: %w", i+1, err)
		}
		s.addDaemon(r)
		if err := dropCaches(); err != nil {
			return nil, err
		}
		pat, err := mockPattern(o.ShmDir, m.Files, workers)
		if err != nil {
			return nil, err
		}
		s.pattern.add(pat)
		if err := dropCaches(); err != nil {
			return nil, err
		}
		b, took, err := sequentialRead(m.Files)
		if err != nil {
			return nil, err
		}
		s.seq = append(s.seq, gibps(b, took))
		o.logf("fill cold %d/%d: daemon load %.2f GiB/s (%.0f%% resident before), mock pattern %.2f GiB/s, read %.2f GiB/s",
			i+1, n, s.daemon[i], 100*r.Resident, s.pattern.fillRates[i], s.seq[i])
	}
	v := s.variant("page cache cold", workers, m)
	return &v, nil
}

// medianFaults is the median of the plugin's fault counts over runs.
func medianFaults(runs []serveRun) (minor, major uint64) {
	var mi, ma []float64
	for _, r := range runs {
		mi, ma = append(mi, float64(r.PluginFaults.Minor)), append(ma, float64(r.PluginFaults.Major))
	}
	return uint64(MedianFloat(mi)), uint64(MedianFloat(ma))
}

// rateSamples rounds the per-run rates of each figure; empty series are
// left out.
func rateSamples(series map[string][]float64) map[string][]float64 {
	out := map[string][]float64{}
	for k, v := range series {
		if len(v) == 0 {
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
