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
)

// FillVariant is the fill rate under one page-cache condition, medians
// over Runs, every rate in GiB/s, every baseline measured in the same
// round as the daemon run it is compared with. The daemon's own rate is
// bytes loaded over its reported Load phase (allocation and export
// excluded), its end-to-end rate bytes over Allocate + Load + Export. The
// baselines: a sequential read of the same files through a seqReadBuffer,
// a memcpy of the same byte count between two prefaulted copyChunk buffers
// on one core (warm only), neither of which allocates the memory it
// writes, and the fills of fresh shared memory without wcache (freshshm.go).
// PageAllocUS is (FreshWrite − AllocatedWrite fill time) per 4 KiB page:
// what allocating a page of shared memory costs the fill. Ratio, the
// target's figure, is DaemonGiBps over the slower of SeqReadGiBps and
// MemcpyGiBps (SeqReadGiBps alone when cold). Resident is the share of the
// checkpoint's pages in the page cache right before the daemon started.
type FillVariant struct {
	Condition           string   `json:"condition"`
	Runs                int      `json:"runs"`
	DaemonGiBps         float64  `json:"daemon_gib_per_s"`
	DaemonEndToEndGiBps float64  `json:"daemon_end_to_end_gib_per_s"`
	Phases              PhasesMS `json:"daemon_phases"`
	SeqReadGiBps        float64  `json:"seq_read_gib_per_s"`
	MemcpyGiBps         float64  `json:"memcpy_gib_per_s,omitempty"`
	MockPattern         *Probe   `json:"mock_pattern"`
	FreshMemcpy         *Probe   `json:"fresh_memcpy,omitempty"`
	FreshWrite          *Probe   `json:"fresh_write,omitempty"`
	AllocatedWrite      *Probe   `json:"allocated_write,omitempty"`
	PageAllocUS         float64  `json:"page_alloc_us,omitempty"`
	Workers             int      `json:"workers"`
	// The plugin's page faults from its start to ready; PagesLoaded the
	// 4 KiB pages of the checkpoint.
	PluginMinorFaults uint64  `json:"plugin_minor_faults"`
	PluginMajorFaults uint64  `json:"plugin_major_faults"`
	PagesLoaded       uint64  `json:"pages_loaded"`
	Ratio             float64 `json:"ratio"`
	Resident          float64 `json:"resident_before"`
	Samples           series  `json:"samples_gib_per_s"`
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

// fillSeries collects the runs of one condition.
type fillSeries struct {
	runs                                      []serveRun
	rates                                     series
	pageCost                                  []float64
	pattern, freshCopy, freshWrite, overWrite probeSeries
}

// variant summarises the series.
func (s *fillSeries) variant(condition string, workers int, m *Model) FillVariant {
	med := s.rates.med
	v := FillVariant{Condition: condition, Runs: len(s.runs), DaemonGiBps: med("daemon"),
		DaemonEndToEndGiBps: med("daemon_end_to_end"), Phases: phasesOf(s.runs),
		SeqReadGiBps: med("seq_read"), MemcpyGiBps: med("memcpy"), MockPattern: s.pattern.probe(),
		FreshMemcpy: s.freshCopy.probe(), FreshWrite: s.freshWrite.probe(), AllocatedWrite: s.overWrite.probe(),
		PageAllocUS: round3(median(s.pageCost)), Workers: workers, PagesLoaded: m.Bytes / pageSize,
		Samples: s.rates}
	var minor, major, resident []float64
	for _, r := range s.runs {
		minor, major = append(minor, float64(r.PluginFaults.Minor)), append(major, float64(r.PluginFaults.Major))
		resident = append(resident, r.Resident)
	}
	v.PluginMinorFaults, v.PluginMajorFaults = uint64(median(minor)), uint64(median(major))
	v.Resident = median(resident)
	baseline := v.SeqReadGiBps
	if v.MemcpyGiBps > 0 {
		baseline = min(baseline, v.MemcpyGiBps)
	}
	v.Ratio = round3(ratio(v.DaemonGiBps, baseline))
	return v
}

// runFill measures the daemon's fill of the large checkpoint, page cache
// warm then cold (dropped before each daemon run and each baseline read).
// Right after each daemon run come the mock's pattern without wcache, the
// target's baselines and the fresh-shared-memory probes.
func runFill(ctx context.Context, e *Env) (any, []Target, error) {
	o := e.Options
	m, err := e.warmModel(e.largeFew())
	if err != nil {
		return nil, nil, err
	}
	res := &FillResult{Model: *m}
	workers := fill.DefaultReaders() // as the mock backend's Load
	s := fillSeries{rates: series{}}
	for i := range o.Repeats {
		if err := fillRound(ctx, o, m, workers, false, &s); err != nil {
			return nil, nil, fmt.Errorf("fill warm run %d: %w", i+1, err)
		}
		o.logf("fill warm %d/%d: daemon %.2f GiB/s, mock pattern %.2f, read %.2f, memcpy %.2f, memcpy into fresh shm %.2f GiB/s",
			i+1, o.Repeats, s.rates["daemon"][i], s.pattern.fillRates[i], s.rates["seq_read"][i], s.rates["memcpy"][i],
			s.freshCopy.fillRates[i])
	}
	res.Warm = s.variant("page cache warm", workers, m)
	switch {
	case !o.Cold:
		res.ColdNote = "not measured: disabled with -cold=false"
	case onTmpfs(m.Dir):
		res.ColdNote = fmt.Sprintf("not measured: the checkpoint lives on tmpfs (%s), which no cache drop makes cold", m.Dir)
	default:
		c := fillSeries{rates: series{}}
		for i := range min(o.Repeats, maxColdRuns) {
			if err = fillRound(ctx, o, m, workers, true, &c); err != nil {
				break
			}
			o.logf("fill cold %d: daemon %.2f GiB/s, read %.2f GiB/s", i+1, c.rates["daemon"][i], c.rates["seq_read"][i])
		}
		if err != nil {
			res.ColdNote = fmt.Sprintf("not measured: %v", err)
			break
		}
		v := c.variant("page cache cold", workers, m)
		res.Cold = &v
		res.ColdNote = "page cache dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before every daemon run and every baseline read"
	}
	targets := []Target{atLeast("daemon fill / slower of (read, memcpy), page cache warm", res.Warm.Ratio, fillRatioGoal, "×")}
	if c := res.Cold; c != nil {
		targets = append(targets, atLeast("daemon fill / sequential read, page cache cold", c.Ratio, fillRatioGoal, "×"))
	}
	w := res.Warm
	fastest := max(w.MockPattern.FillGiBps, w.FreshMemcpy.FillGiBps, w.FreshWrite.FillGiBps)
	targets = append(targets,
		atLeast("daemon fill / fastest fill of fresh shared memory without wcache (same run), page cache warm", ratio(w.DaemonGiBps, fastest), fillRatioGoal, "×"),
		reported("daemon fill / the mock's pattern without wcache, page cache warm", ratio(w.DaemonGiBps, w.MockPattern.FillGiBps), "×"),
		reported("daemon allocate + load + export / sequential read, page cache warm", ratio(w.DaemonEndToEndGiBps, w.SeqReadGiBps), "×"))
	return res, targets, nil
}

// fillRound is one round: the daemon, the mock's pattern right after it,
// the sequential read, and when warm the memory baselines.
func fillRound(ctx context.Context, o Options, m *Model, workers int, cold bool, s *fillSeries) error {
	r, err := serveOnce(ctx, o, "fill", m, cold)
	if err != nil {
		return err
	}
	p := r.Phases
	s.runs = append(s.runs, r)
	s.rates.add("daemon", gibps(p.BytesLoaded, p.Load))
	s.rates.add("daemon_end_to_end", gibps(p.BytesLoaded, p.Allocate+p.Load+p.Export))
	if cold {
		if err := dropCaches(); err != nil {
			return err
		}
	}
	pat, err := mockPattern(o.ShmDir, m.Files, workers)
	if err != nil {
		return err
	}
	s.pattern.add(pat)
	if cold {
		if err := dropCaches(); err != nil {
			return err
		}
	}
	n, took, err := sequentialRead(m.Files)
	if err != nil {
		return err
	}
	s.rates.add("seq_read", gibps(n, took))
	if cold {
		return nil
	}
	s.rates.add("memcpy", gibps(m.Bytes, memcpy(m.Bytes)))
	fm, err := freshMemcpy(o.ShmDir, int64(pat.Bytes), workers)
	if err != nil {
		return err
	}
	s.freshCopy.add(fm)
	fresh, over, err := freshWrite(o.ShmDir, int64(pat.Bytes), workers)
	if err != nil {
		return err
	}
	s.freshWrite.add(fresh)
	s.overWrite.add(over)
	if pages := fresh.Bytes / pageSize; pages > 0 {
		s.pageCost = append(s.pageCost, float64(fresh.Fill-over.Fill)/float64(time.Microsecond)/float64(pages))
	}
	return nil
}

// sequentialRead reads every file from start to end through one buffer and
// returns the bytes read and the time taken: the rate of the storage path
// (page cache when warm) with nothing else in the way.
func sequentialRead(files []string) (uint64, time.Duration, error) {
	buf := make([]byte, seqReadBuffer)
	var total uint64
	start := time.Now()
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return 0, 0, fmt.Errorf("sequential read: %w", err)
		}
		for {
			n, err := f.Read(buf)
			total += uint64(n)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.Close()
				return 0, 0, fmt.Errorf("sequential read %s: %w", path, err)
			}
		}
		f.Close()
	}
	return total, time.Since(start), nil
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
