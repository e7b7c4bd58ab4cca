package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/wcache/wcache/sdk/fill"
)

// PipelineResult is the pipeline scenario's figures: the CUDA backend's
// fill (sdk/fill with per-reader streams and pinned staging) through the
// real daemon against the fake driver (plugins/cuda/testdata/fakecuda, built
// with gcc), whose device memory is host memory allocated up front
// (FAKECUDA_PREFAULT) and whose copy engine runs at a set rate
// (FAKECUDA_COPY_GBPS) or as fast as memcpy. Rates are GiB/s, medians.
// Read1/ReadN: sdk/fill reading the checkpoint from the page cache with 1
// and N (Readers, the default) readers and a copy that does nothing.
// Fill1/FillN: the daemon's Load phase with 1 and N readers, copies
// unpaced. CopyGiBps is the paced engine's rate, half the unpaced N-reader
// fill of the first round so that the engine is the bound; PacedGiBps the
// daemon's Load with N readers on it; Ratio, the target's figure, is
// PacedGiBps / min(ReadNGiBps, CopyGiBps). NotMeasured says why nothing was
// measured (no gcc, no CUDA plugin).
type PipelineResult struct {
	NotMeasured string  `json:"not_measured,omitempty"`
	Model       Model   `json:"model"`
	Runs        int     `json:"runs"`
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

// runPipeline measures the fill pipeline on the fake CUDA driver with the
// small checkpoint, page cache warm, Repeats rounds of: the read rates with
// 1 and N readers, the daemon's fill with 1 and N readers unpaced, and
// with N readers on the paced engine.
func runPipeline(ctx context.Context, e *Env) (any, []Target, error) {
	o := e.Options
	res := &PipelineResult{Readers: fill.DefaultReaders(), Samples: series{}}
	lib, why := buildFakeCUDA(o)
	if why != "" {
		res.NotMeasured = why
		o.logf("pipeline: not measured: %s", why)
		return res, nil, nil
	}
	defer os.RemoveAll(filepath.Dir(lib))
	m, err := e.warmModel(e.smallFew())
	if err != nil {
		return nil, nil, err
	}
	res.Model, res.Runs = *m, o.Repeats
	n := res.Readers
	var copyGBps float64
	for i := range o.Repeats {
		for _, r := range []int{1, n} {
			rate, err := pipelineRead(m.Files, r)
			if err != nil {
				return nil, nil, err
			}
			res.Samples.add(fmt.Sprintf("read_%d", r), rate)
		}
		for _, run := range []struct {
			key     string
			readers int
			paced   bool
		}{{"fill_1", 1, false}, {"fill_n", n, false}, {"paced", n, true}} {
			if run.paced && i == 0 {
				// Half of what the fake moves unpaced: the engine, not the
				// memcpy on the CPUs, is then the bound.
				copyGBps = res.Samples.last("fill_n") * (1 << 30) / 1e9 / 2
				res.CopyGiBps = round3(copyGBps * 1e9 / (1 << 30))
			}
			gbps := 0.0
			if run.paced {
				gbps = copyGBps
			}
			rate, err := fakeCUDAFill(ctx, o, lib, m, run.readers, gbps)
			if err != nil {
				return nil, nil, fmt.Errorf("pipeline %s: %w", run.key, err)
			}
			res.Samples.add(run.key, rate)
		}
		o.logf("pipeline %d/%d: read %.2f / %.2f GiB/s (1 / %d readers), fill %.2f / %.2f, paced at %.2f: %.2f",
			i+1, o.Repeats, res.Samples.last("read_1"), res.Samples.last(fmt.Sprintf("read_%d", n)), n, res.Samples.last("fill_1"),
			res.Samples.last("fill_n"), res.CopyGiBps, res.Samples.last("paced"))
	}
	med := res.Samples.med
	res.Read1GiBps, res.ReadNGiBps = med("read_1"), med(fmt.Sprintf("read_%d", n))
	res.Fill1GiBps, res.FillNGiBps, res.PacedGiBps = med("fill_1"), med("fill_n"), med("paced")
	res.Scaling = round3(ratio(res.FillNGiBps, res.Fill1GiBps))
	res.ReadScaling = round3(ratio(res.ReadNGiBps, res.Read1GiBps))
	res.Ratio = round3(ratio(res.PacedGiBps, min(res.ReadNGiBps, res.CopyGiBps)))
	return res, []Target{
		atLeast(fmt.Sprintf("fake-driver fill / min(%d-reader read, copy engine)", n), res.Ratio, fillRatioGoal, "×"),
		reported(fmt.Sprintf("fake-driver fill, readers 1 → %d (unpaced copies)", n), res.Scaling, "×"),
		reported(fmt.Sprintf("pipeline read rate, readers 1 → %d", n), res.ReadScaling, "×"),
	}, nil
}

// buildFakeCUDA compiles the fake driver into a new temporary folder and
// returns its path, or why it cannot (no gcc, no source, no CUDA plugin).
func buildFakeCUDA(o Options) (lib, why string) {
	if _, err := os.Stat(filepath.Join(o.BinDir, cudaPlugin)); err != nil {
		return "", fmt.Sprintf("no %s in the binaries (make build builds it with cgo)", cudaPlugin)
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return "", "gcc not found: the fake CUDA driver is built with it"
	}
	src := filepath.Join(o.RepoDir, "plugins", "cuda", "testdata", "fakecuda", "fakecuda.c")
	if _, err := os.Stat(src); err != nil {
		return "", fmt.Sprintf("no fake driver source: %v", err)
	}
	dir, err := os.MkdirTemp("", "wcache-bench-fakecuda-")
	if err != nil {
		return "", err.Error()
	}
	lib = filepath.Join(dir, "libcuda.so.1")
	// The copy engine and IPC headers are shared with the fake HIP
	// (plugins/internal/fakelib/include, which this package may not import
	// as Go: only its C headers are used).
	include := filepath.Join(o.RepoDir, "plugins", "internal", "fakelib", "include")
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-I", include, "-o", lib, src, "-lpthread").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Sprintf("gcc %s: %v: %s", src, err, tail(string(out)))
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
	if _, err := fill.Fill(context.Background(), fill.WriterAt{}, total, extents, nil,
		fill.Options{Readers: readers, Direct: fill.DirectNever}); err != nil {
		return 0, fmt.Errorf("pipeline read: %w", err)
	}
	return gibps(total, time.Since(start)), nil
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
	w.Setenv("WCACHE_CUDA_LIBRARY="+lib,
		"WCACHE_NVML_LIBRARY="+filepath.Join(filepath.Dir(lib), "no-nvml.so"),
		"WCACHE_CUDA_READERS="+strconv.Itoa(readers),
		"WCACHE_CUDA_DIRECT_IO=0",
		"WCACHE_CUDA_HEALTH_INTERVAL=0",
		"FAKECUDA_DEVICES="+w.UUID,
		"FAKECUDA_MEMORY="+strconv.FormatUint(m.Bytes+m.Bytes/4+(256<<20), 10),
		"FAKECUDA_PREFAULT=1",
		"FAKECUDA_COPY_GBPS="+strconv.FormatFloat(gbps, 'f', 4, 64))
	d, err := w.startServe(ctx, nil, "--model", m.Dir)
	if err != nil {
		return 0, err
	}
	p, err := w.loaded(ctx, d, m)
	if err != nil {
		return 0, err
	}
	return gibps(p.BytesLoaded, p.Load), d.Stop()
}
