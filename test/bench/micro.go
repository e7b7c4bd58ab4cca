package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// MicroBench is one Go benchmark: every value it printed by its unit,
// those of go test (ns/op, MB/s with b.SetBytes, B/op, allocs/op) and its
// own (b.ReportMetric).
type MicroBench struct {
	Package string             `json:"package"`
	Name    string             `json:"name"`
	Metrics map[string]float64 `json:"metrics"`
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

// parseBenchOutput reads `go test -bench -benchmem` output (the Go
// benchmark format, golang.org/x/perf/benchfmt): each benchmark with its
// package ("pkg:" line), its name without the GOMAXPROCS suffix, and its
// values in the units it printed them in.
func parseBenchOutput(out string) []MicroBench {
	var res []MicroBench
	for r := benchfmt.NewReader(strings.NewReader(out), "go test"); r.Scan(); {
		rec, ok := r.Result().(*benchfmt.Result)
		if !ok {
			continue // a malformed line or unit metadata
		}
		base, parts := rec.Name.Parts()
		if len(parts) > 0 && parts[len(parts)-1][0] == '-' {
			parts = parts[:len(parts)-1] // the GOMAXPROCS suffix
		}
		b := MicroBench{Package: rec.GetConfig("pkg"), Name: "Benchmark" + string(bytes.Join(append([][]byte{base}, parts...), nil)),
			Metrics: map[string]float64{}}
		for _, v := range rec.Values {
			if v.OrigUnit != "" { // benchfmt tidied it (ns/op to sec/op, MB/s to B/s)
				v.Unit, v.Value = v.OrigUnit, v.OrigValue
			}
			b.Metrics[v.Unit] = v.Value
		}
		res = append(res, b)
	}
	return res
}
