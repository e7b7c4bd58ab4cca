package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/sdk/fill"
	"github.com/wcache/wcache/test/benchreport"
	"github.com/wcache/wcache/test/testproc"
)

// PipelineResult is the CUDA backend's fill through the real daemon on
// the fake driver (the docs template, "Fill pipeline", says what each
// is): rates read_1 and read_n (1 and Readers readers), fill_1, fill_n
// and paced (the copy engine at CopyGiBps); ratios read_scaling (read_n ÷
// read_1), scaling (fill_n ÷ fill_1) and paced (÷ min(read_n, copy)).
// NotMeasured says why nothing was.
type PipelineResult struct {
	NotMeasured string  `json:"not_measured,omitempty"`
	Model       Model   `json:"model"`
	Readers     int     `json:"readers"`
	CopyGiBps   float64 `json:"copy_gib_per_s"`
	benchreport.Figures
}

// cudaPlugin is the CUDA backend binary the scenario needs.
const cudaPlugin = "wcache-backend-cuda"

// runPipeline measures the small checkpoint, page cache warm, Repeats
// rounds of every read and fill.
func runPipeline(ctx context.Context, e *Env) (any, []Target, error) {
	res, rates := &PipelineResult{Readers: fill.DefaultReaders()}, series{}
	lib, why := buildFakeCUDA(e.Options)
	if why != "" {
		res.NotMeasured = why
		e.logf("pipeline: not measured: %s", why)
		return res, nil, nil
	}
	defer os.RemoveAll(filepath.Dir(lib))
	m, err := e.warmModel(e.smallFew())
	if err != nil {
		return nil, nil, err
	}
	res.Model = *m
	n, copyGBps := res.Readers, 0.0
	err = e.rounds("pipeline", e.Repeats, func(i int) (string, error) {
		// Reads, fills with unpaced copies, the fill with the copy engine paced.
		for _, run := range []struct {
			key     string
			readers int
		}{{"read_1", 1}, {"read_n", n}, {"fill_1", 1}, {"fill_n", n}, {"paced", n}} {
			gbps := 0.0
			if run.key == "paced" {
				if i == 0 { // half of the unpaced fill: the engine, not the CPUs' memcpy, bounds it
					copyGBps = rates.Last("fill_n") * (1 << 30) / 1e9 / 2
					res.CopyGiBps = benchreport.Round3(copyGBps * 1e9 / (1 << 30))
				}
				gbps = copyGBps
			}
			read := func() (float64, error) { return pipelineRead(m.Files, run.readers) }
			if !strings.HasPrefix(run.key, "read") {
				read = func() (float64, error) { return fakeCUDAFill(ctx, e.Options, lib, m, run.readers, gbps) }
			}
			rate, err := read()
			if err != nil {
				return "", fmt.Errorf("%s: %w", run.key, err)
			}
			rates.Add(run.key, rate)
		}
		l := rates.Last
		return fmt.Sprintf("read %.2f / %.2f GiB/s (1 / %d readers), fill %.2f / %.2f, paced at %.2f: %.2f",
			l("read_1"), l("read_n"), n, l("fill_1"), l("fill_n"), res.CopyGiBps, l("paced")), nil
	})
	if err != nil {
		return nil, nil, err
	}
	res.Figures = benchreport.FiguresOf(nil, rates)
	ratio := benchreport.Round3(benchreport.Ratio(res.Rates["paced"], min(res.Rates["read_n"], res.CopyGiBps)))
	res.Ratios["paced"] = ratio
	return res, []Target{
		benchreport.AtLeast(fmt.Sprintf("fake-driver fill / min(%d-reader read, copy engine)", n), ratio, fillRatioGoal, "×"),
		benchreport.Reported(fmt.Sprintf("fake-driver fill, readers 1 → %d (unpaced copies)", n), res.Ratio("scaling", "fill_n", "fill_1"), "×"),
		benchreport.Reported(fmt.Sprintf("pipeline read rate, readers 1 → %d", n), res.Ratio("read_scaling", "read_n", "read_1"), "×"),
	}, nil
}

// buildFakeCUDA compiles the fake driver into a new temporary folder and
// returns its path, or why it cannot (no gcc, no source, no CUDA plugin).
func buildFakeCUDA(o Options) (lib, why string) {
	if _, err := os.Stat(filepath.Join(o.BinDir, cudaPlugin)); err != nil {
		return "", fmt.Sprintf("no %s in the binaries (make build builds it with cgo)", cudaPlugin)
	}
	dir, err := os.MkdirTemp("", "wcache-bench-fakecuda-")
	if err == nil {
		if lib, err = testproc.BuildFakeCUDA(o.RepoDir, dir); err != nil {
			os.RemoveAll(dir)
		}
	}
	if err != nil {
		return "", tail(err.Error())
	}
	return lib, ""
}

// pipelineRead is the GiB/s of sdk/fill reading files with readers
// readers and default buffers, copying nothing.
func pipelineRead(files []string, readers int) (float64, error) {
	extents, total, err := extentsOf(files)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	_, err = fill.Fill(context.Background(), fill.WriterAt{}, total, extents, nil, fill.Options{Readers: readers, Direct: fill.DirectNever})
	return benchreport.GiBps(total, time.Since(start)), err
}

// fakeCUDAFill serves m with the CUDA backend on the fake driver (readers
// readers, the copy engine at gbps GB/s, 0 unpaced) and returns the
// daemon's Load rate in GiB/s.
func fakeCUDAFill(ctx context.Context, o Options, lib string, m *Model, readers int, gbps float64) (float64, error) {
	w, err := newWorld(o, "pipeline", m)
	if err != nil {
		return 0, err
	}
	defer w.Close()
	w.Backend = "cuda"
	w.Setenv(testproc.FakeCUDAEnv(lib, m.Bytes+m.Bytes/4+(256<<20), w.UUID)...)
	w.Setenv("WCACHE_CUDA_READERS="+strconv.Itoa(readers), "FAKECUDA_PREFAULT=1",
		"FAKECUDA_COPY_GBPS="+strconv.FormatFloat(gbps, 'f', 4, 64))
	d, err := w.startServe(ctx, 0, nil, "--model", m.Dir)
	var p client.StartPhases
	if err == nil {
		if p, err = w.loaded(ctx, d, m); err == nil {
			err = d.Stop()
		}
	}
	return benchreport.GiBps(p.BytesLoaded, p.Load), err
}
