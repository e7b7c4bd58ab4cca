package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk/fill"
	"github.com/wcache/wcache/test/benchreport"
	"github.com/wcache/wcache/test/testproc"
)

// FillVariant is the fill under one page-cache condition, each baseline
// from the same round as the daemon run (the docs template, "Fill rate",
// says what each is): the daemon runs' times (serveLaps; their n is the
// runs); rates daemon, daemon_end_to_end (allocate + load + export),
// seq_read and (warm) memcpy; ratio daemon, ÷ the slower of seq_read and
// memcpy (seq_read alone when cold). Probes are the fills of fresh shared
// memory (warm: the mock's pattern, memcpy, write, and overwrite, the
// write again once the pages exist); PageAllocUS is (write − overwrite)
// per 4 KiB page.
type FillVariant struct {
	Condition   string            `json:"condition"`
	Probes      map[string]*Probe `json:"probes"`
	PageAllocUS float64           `json:"page_alloc_us,omitempty"`
	Workers     int               `json:"workers"`
	// The plugin's page faults from its start to ready; PagesLoaded the
	// 4 KiB pages of the checkpoint.
	PluginMinorFaults uint64  `json:"plugin_minor_faults"`
	PluginMajorFaults uint64  `json:"plugin_major_faults"`
	PagesLoaded       uint64  `json:"pages_loaded"`
	Resident          float64 `json:"resident_before"`
	benchreport.Figures
}

// FillResult is the fill scenario's figures; ColdNote says why cold was
// not measured, or how it was.
type FillResult struct {
	Model    Model        `json:"model"`
	Warm     FillVariant  `json:"warm"`
	Cold     *FillVariant `json:"cold,omitempty"`
	ColdNote string       `json:"cold_note"`
}

const (
	fillRatioGoal = 0.8
	// maxColdRuns bounds cold runs: each reads the whole checkpoint from disk.
	maxColdRuns = 3
	// Baseline buffers: a reader's usual large buffer; the memcpy copies
	// between two prefaulted buffers of copyChunk.
	seqReadBuffer = 8 << 20
	copyChunk     = 64 << 20
)

// fillSeries collects the runs of one condition: the daemon's, the rates,
// the page costs and the probes by name (read: the sequential read).
type fillSeries struct {
	runs     []serveRun
	rates    series
	pageCost []float64
	probes   map[string][]fillTiming
}

// variant summarises the series.
func (s *fillSeries) variant(condition string, workers int, m *Model) FillVariant {
	v := FillVariant{Condition: condition, Probes: map[string]*Probe{},
		PageAllocUS: benchreport.Round3(benchreport.Median(s.pageCost)), Workers: workers, PagesLoaded: m.Bytes / pageSize,
		Figures: benchreport.FiguresOf(serveLaps(s.runs), s.rates)}
	for name, ts := range s.probes {
		if name != "read" { // seq_read
			v.Probes[name] = probeOf(ts)
		}
	}
	var minor, major, resident []float64
	for _, r := range s.runs {
		minor, major = append(minor, float64(r.PluginFaults.Minor)), append(major, float64(r.PluginFaults.Major))
		resident = append(resident, r.Resident)
	}
	v.PluginMinorFaults, v.PluginMajorFaults, v.Resident = uint64(benchreport.Median(minor)), uint64(benchreport.Median(major)), benchreport.Median(resident)
	baseline := v.Rates["seq_read"] // the slower of read and memcpy (read alone when cold)
	if v.Rates["memcpy"] > 0 {
		baseline = min(baseline, v.Rates["memcpy"])
	}
	v.Ratios["daemon"] = benchreport.Round3(benchreport.Ratio(v.Rates["daemon"], baseline))
	return v
}

// runFill measures the daemon's fill of the large checkpoint, page cache
// warm then cold (dropped before each daemon run and each baseline read).
// Right after each daemon run come the mock's pattern without wcache, the
// target's baselines and the fresh-shared-memory probes.
func runFill(ctx context.Context, e *Env) (any, []Target, error) {
	m, err := e.warmModel(e.largeFew())
	if err != nil {
		return nil, nil, err
	}
	res := &FillResult{Model: *m}
	workers := fill.DefaultReaders() // as the mock backend's Load
	measure := func(name string, runs int, cold bool) (*fillSeries, error) {
		s := &fillSeries{rates: series{}, probes: map[string][]fillTiming{}}
		return s, e.rounds(name, runs, func(int) (string, error) {
			if err := fillRound(ctx, e.Options, m, workers, cold, s); err != nil {
				return "", err
			}
			last := func(k string) float64 { return s.probes[k][len(s.probes[k])-1].rate() }
			if cold {
				return fmt.Sprintf("daemon %.2f GiB/s, read %.2f GiB/s", s.rates.Last("daemon"), s.rates.Last("seq_read")), nil
			}
			return fmt.Sprintf("daemon %.2f GiB/s, mock pattern %.2f, read %.2f, memcpy %.2f, memcpy into fresh shm %.2f GiB/s",
				s.rates.Last("daemon"), last("pattern"), s.rates.Last("seq_read"), s.rates.Last("memcpy"), last("memcpy")), nil
		})
	}
	warm, err := measure("fill warm", e.Repeats, false)
	if err != nil {
		return nil, nil, err
	}
	res.Warm = warm.variant("page cache warm", workers, m)
	switch {
	case !e.Cold:
		res.ColdNote = "not measured: disabled with -cold=false"
	case onTmpfs(m.Dir):
		res.ColdNote = fmt.Sprintf("not measured: the checkpoint lives on tmpfs (%s), which no cache drop makes cold", m.Dir)
	default:
		c, err := measure("fill cold", min(e.Repeats, maxColdRuns), true)
		if err != nil {
			res.ColdNote = fmt.Sprintf("not measured: %v", err)
			break
		}
		v := c.variant("page cache cold", workers, m)
		res.Cold = &v
		res.ColdNote = "page cache dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before every daemon run and every baseline read"
	}
	targets := []Target{benchreport.AtLeast("daemon fill / slower of (read, memcpy), page cache warm", res.Warm.Ratios["daemon"], fillRatioGoal, "×")}
	if c := res.Cold; c != nil {
		targets = append(targets, benchreport.AtLeast("daemon fill / sequential read, page cache cold", c.Ratios["daemon"], fillRatioGoal, "×"))
	}
	w, p := res.Warm.Rates, res.Warm.Probes
	fastest := max(p["pattern"].Rates["fill"], p["memcpy"].Rates["fill"], p["write"].Rates["fill"])
	targets = append(targets,
		benchreport.AtLeast("daemon fill / fastest fill of fresh shared memory without wcache (same run), page cache warm", benchreport.Ratio(w["daemon"], fastest), fillRatioGoal, "×"),
		benchreport.Reported("daemon fill / the mock's pattern without wcache, page cache warm", benchreport.Ratio(w["daemon"], p["pattern"].Rates["fill"]), "×"),
		benchreport.Reported("daemon allocate + load + export / sequential read, page cache warm", benchreport.Ratio(w["daemon_end_to_end"], w["seq_read"]), "×"))
	return res, targets, nil
}

// fillRound is one round: the daemon, the mock's pattern right after it,
// the sequential read, and when warm the memory baselines. Cold, the page
// cache is dropped before each.
func fillRound(ctx context.Context, o Options, m *Model, workers int, cold bool, s *fillSeries) error {
	r, err := serveOnce(ctx, o, "fill", m, cold)
	if err != nil {
		return err
	}
	p := r.Phases
	s.runs = append(s.runs, r)
	s.rates.Add("daemon", benchreport.GiBps(p.BytesLoaded, p.Load))
	s.rates.Add("daemon_end_to_end", benchreport.GiBps(p.BytesLoaded, p.Allocate+p.Load+p.Export))
	probe := func(name string, f func() (fillTiming, error)) error {
		if cold {
			if err := testproc.DropCaches(); err != nil {
				return err
			}
		}
		t, err := f()
		s.probes[name] = append(s.probes[name], t)
		return err
	}
	err = probe("pattern", func() (fillTiming, error) { return mockPattern(o.ShmDir, m.Files, workers) })
	if err == nil {
		err = probe("read", func() (fillTiming, error) { return sequentialRead(m.Files) })
	}
	if err != nil {
		return err
	}
	s.rates.Add("seq_read", s.probes["read"][len(s.probes["read"])-1].rate())
	if cold {
		return nil
	}
	s.rates.Add("memcpy", benchreport.GiBps(m.Bytes, memcpy(m.Bytes)))
	bytes := int64(s.probes["pattern"][0].Bytes)
	if err := probe("memcpy", func() (fillTiming, error) { return freshMemcpy(o.ShmDir, bytes, workers) }); err != nil {
		return err
	}
	fresh, over, err := freshWrite(o.ShmDir, bytes, workers)
	if err != nil {
		return err
	}
	s.probes["write"], s.probes["overwrite"] = append(s.probes["write"], fresh), append(s.probes["overwrite"], over)
	if pages := fresh.Bytes / pageSize; pages > 0 {
		s.pageCost = append(s.pageCost, float64(fresh.Fill-over.Fill)/float64(time.Microsecond)/float64(pages))
	}
	return nil
}

// sequentialRead reads every file from start to end through one buffer
// and times it: the rate of the storage path (page cache when warm) with
// nothing else in the way.
func sequentialRead(files []string) (t fillTiming, err error) {
	buf := make([]byte, seqReadBuffer)
	start := time.Now()
	for _, path := range files {
		f, err := os.Open(path)
		for n := 0; err == nil; t.Bytes += uint64(n) {
			n, err = f.Read(buf)
		}
		if f != nil {
			f.Close()
		}
		if !errors.Is(err, io.EOF) {
			return t, fmt.Errorf("sequential read %s: %w", path, err)
		}
	}
	t.Fill = time.Since(start)
	return t, nil
}

// memcpy copies total bytes between two prefaulted buffers of copyChunk
// bytes and returns the time taken: the memory bandwidth of one core, with
// no page allocated (freshMemcpy is the same copy into fresh shared memory).
func memcpy(total uint64) time.Duration {
	src, dst := patterned(copyChunk), make([]byte, copyChunk)
	copy(dst, src) // fault dst in
	start := time.Now()
	for left := total; left > 0; {
		n := min(left, copyChunk)
		copy(dst[:n], src[:n])
		left -= n
	}
	return time.Since(start)
}

// onTmpfs reports whether dir lives on tmpfs (or ramfs), where dropping the
// page cache cannot make a read cold.
func onTmpfs(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Clean(dir), &st); err != nil {
		return false
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}
