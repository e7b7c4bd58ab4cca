package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// MicroBench is one Go benchmark, with the metrics it reports itself
// (b.ReportMetric) by unit.
type MicroBench struct {
	Package     string             `json:"package"`
	Name        string             `json:"name"`
	NsPerOp     float64            `json:"ns_per_op"`
	MBPerSec    float64            `json:"mb_per_s,omitempty"`
	BytesPerOp  int64              `json:"bytes_per_op"`
	AllocsPerOp int64              `json:"allocs_per_op"`
	Metrics     map[string]float64 `json:"metrics,omitempty"`
}

// MicroResult are Go benchmarks owned by their packages, and the command
// that ran them.
type MicroResult struct {
	Command    string       `json:"command"`
	Benchmarks []MicroBench `json:"benchmarks"`
}

// microPackages are the packages whose benchmarks cover the hot paths:
// manifest building (plan), safetensors header parsing, path derivation,
// and the GPU backends' fill pipeline through their fake drivers' copy
// engines (BenchmarkFillThroughFakeCopyEngine: libcuda and libamdhip64
// fakes built with gcc by the packages' tests).
func microPackages() []string {
	return []string{"./core/plan", "./core/safetensors", "./core/paths",
		"./plugins/cuda/cudabackend", "./plugins/rocm/rocmbackend"}
}

// runMicro runs the hot paths' Go benchmarks (goBench). It checks no
// target.
func runMicro(ctx context.Context, e *Env) (any, []Target, error) {
	res, err := goBench(ctx, e.RepoDir, ".", e.MicroBenchtime, microPackages()...)
	if err != nil {
		return nil, nil, err
	}
	return res, nil, nil
}

// goBench runs the benchmarks matching pattern in pkgs, in the source
// tree dir, with `go test -bench` (the go command on PATH), and parses
// what they print; none printed is an error.
func goBench(ctx context.Context, dir, pattern, benchtime string, pkgs ...string) (*MicroResult, error) {
	args := append([]string{"test", "-run", "^$", "-bench", pattern, "-benchmem", "-count", "1", "-benchtime", benchtime}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	res := &MicroResult{Command: "go " + strings.Join(args, " "), Benchmarks: parseBenchOutput(string(out))}
	if err == nil && len(res.Benchmarks) == 0 {
		err = errors.New("printed no benchmark")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", res.Command, err, tail(string(out)))
	}
	return res, nil
}

// parseBenchOutput reads `go test -bench -benchmem` output.
func parseBenchOutput(out string) []MicroBench {
	var res []MicroBench
	pkg := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		b := MicroBench{Package: pkg, Name: f[0]}
		if i := strings.LastIndexByte(b.Name, '-'); i > 0 {
			if _, err := strconv.Atoi(b.Name[i+1:]); err == nil {
				b.Name = b.Name[:i] // the GOMAXPROCS suffix
			}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				b.NsPerOp = v
			case "MB/s":
				b.MBPerSec = v
			case "B/op":
				b.BytesPerOp = int64(v)
			case "allocs/op":
				b.AllocsPerOp = int64(v)
			default:
				if b.Metrics == nil {
					b.Metrics = map[string]float64{}
				}
				b.Metrics[f[i+1]] = v
			}
		}
		res = append(res, b)
	}
	return res
}
