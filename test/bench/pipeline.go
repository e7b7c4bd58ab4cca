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
// the fake driver (GiB/s, medians; the docs template, "Fill pipeline",
// says what each is): Ratio = Paced / min(ReadN, Copy). NotMeasured says
// why nothing was.
type PipelineResult struct {
	NotMeasured string  `json:"not_measured,omitempty"`
	Model       Model   `json:"model"`
	Readers     int     `json:"readers"`
	Read1GiBps  float64 `json:"read_1_gib_per_s"`
	ReadNGiBps  float64 `json:"read_n_gib_per_s"`
	ReadScaling float64 `json:"read_scaling"`
	Fill1GiBps  float64 `json:"fill_1_gib_per_s"`
	FillNGiBps  float64 `json:"fill_n_gib_per_s"`
	Scaling     float64 `json:"scaling"`
	CopyGiBps   float64 `json:"copy_gib_per_s"`
	PacedGiBps  float64 `json:"paced_fill_gib_per_s"`
	Ratio       float64 `json:"ratio"`
	Samples     series  `json:"samples_gib_per_s"`
}

// cudaPlugin is the CUDA backend binary the scenario needs.
const cudaPlugin = "wcache-backend-cuda"

// runPipeline measures the small checkpoint, page cache warm, Repeats
// rounds of every read and fill.
func runPipeline(ctx context.Context, e *Env) (any, []Target, error) {
	res := &PipelineResult{Readers: fill.DefaultReaders(), Samples: series{}}
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
	rn := fmt.Sprintf("read_%d", n)
	err = e.rounds("pipeline", e.Repeats, func(i int) (string, error) {
		// Reads, fills with unpaced copies, the fill with the copy engine paced.
		for _, run := range []struct {
			key     string
			readers int
		}{{"read_1", 1}, {rn, n}, {"fill_1", 1}, {"fill_n", n}, {"paced", n}} {
			gbps := 0.0
			if run.key == "paced" {
				if i == 0 { // half of the unpaced fill: the engine, not the CPUs' memcpy, bounds it
					copyGBps = res.Samples.Last("fill_n") * (1 << 30) / 1e9 / 2
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
			res.Samples.Add(run.key, rate)
		}
		l := res.Samples.Last
		return fmt.Sprintf("read %.2f / %.2f GiB/s (1 / %d readers), fill %.2f / %.2f, paced at %.2f: %.2f",
			l("read_1"), l(rn), n, l("fill_1"), l("fill_n"), res.CopyGiBps, l("paced")), nil
	})
	if err != nil {
		return nil, nil, err
	}
	res.ReadNGiBps, res.Read1GiBps, res.ReadScaling = res.Samples.MedRatio(rn, "read_1")
	res.FillNGiBps, res.Fill1GiBps, res.Scaling = res.Samples.MedRatio("fill_n", "fill_1")
	res.PacedGiBps = res.Samples.Med("paced")
	res.Ratio = benchreport.Round3(benchreport.Ratio(res.PacedGiBps, min(res.ReadNGiBps, res.CopyGiBps)))
	return res, []Target{
		benchreport.AtLeast(fmt.Sprintf("fake-driver fill / min(%d-reader read, copy engine)", n), res.Ratio, fillRatioGoal, "×"),
		benchreport.Reported(fmt.Sprintf("fake-driver fill, readers 1 → %d (unpaced copies)", n), res.Scaling, "×"),
		benchreport.Reported(fmt.Sprintf("pipeline read rate, readers 1 → %d", n), res.ReadScaling, "×"),
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
