package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Environment variables read by ParseOptions; a flag wins over its variable.
const (
	EnvGiB         = "WCACHE_BENCH_GIB"
	EnvSmallMiB    = "WCACHE_BENCH_SMALL_MIB"
	EnvRepeats     = "WCACHE_BENCH_REPEATS"
	EnvAttachIters = "WCACHE_BENCH_ATTACH_ITERS"
	EnvClients     = "WCACHE_BENCH_CLIENTS"
	EnvSeconds     = "WCACHE_BENCH_SECONDS"
	EnvTmpDir      = "WCACHE_BENCH_TMPDIR"
	EnvPython      = "WCACHE_BENCH_PYTHON"
	EnvOnly        = "WCACHE_BENCH_ONLY"
	EnvOut         = "WCACHE_BENCH_OUT"
)

// Options configure a benchmark run; ParseOptions fills the defaults shown
// in brackets (the flags' help says which flag sets each).
type Options struct {
	// BinDir holds wcache, wcache-backend-mock and, for the pipeline
	// scenario, wcache-backend-cuda [bin].
	BinDir string
	// RepoDir is the source tree: the commit, the Python client
	// (clients/python/src), the fake CUDA driver's source and the Go
	// micro-benchmarks are taken from there [.].
	RepoDir string
	// OutDir is the results folder; a run writes OutDir/benchmarks.json and
	// nothing else [bench-results].
	OutDir string
	// TmpDir is where checkpoints are generated: a disk, not tmpfs, for a
	// cold read to mean something [os.TempDir()]. ShmDir is the parent of
	// each scenario's shared-memory folder [/dev/shm when present, else TmpDir].
	TmpDir, ShmDir string
	// LargeBytes and SmallBytes are the two checkpoint sizes [4 GiB, 256 MiB];
	// FewTensors and ManyTensors the two manifest sizes [300, 3000].
	LargeBytes, SmallBytes  uint64
	FewTensors, ManyTensors int
	// Repeats is the number of fresh processes per restart variant and of
	// serve runs per fill, publish, pipeline, start-up and takeover case [5];
	// AttachIters the timed attaches per manifest [300].
	Repeats, AttachIters int
	// Clients and ConcurrencyDuration shape the concurrency run [64, 10 s].
	Clients             int
	ConcurrencyDuration time.Duration
	// Python is the interpreter of the Python scenarios, with numpy and
	// torch [/usr/bin/python3].
	Python string
	// Scenarios to run, by name [all, in the order of Scenarios()].
	Scenarios []string
	// Cold tries a page-cache-cold fill (drop_caches, needs root) [true].
	Cold bool
	// MicroBenchtime is -benchtime of the hot paths' Go benchmarks [1s].
	MicroBenchtime string
	// Keep leaves the generated checkpoints behind [false].
	Keep bool
	// HelperArgv starts a fresh helper process, to which the helper mode
	// and its flags are appended [this executable, "helper"]; HelperEnv is
	// extra environment for helpers.
	HelperArgv, HelperEnv []string
	// Log receives progress lines [stderr].
	Log io.Writer
}

// ParseOptions reads flags from args over the environment (getenv; nil is
// os.Getenv) over the defaults. A malformed value is an error naming the
// flag or variable.
func ParseOptions(args []string, getenv func(string) string) (Options, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var errs []error
	// env is the variable key as a number (def when unset); integer
	// asks for a whole number.
	env := func(key string, def float64, integer bool) float64 {
		v := strings.TrimSpace(getenv(key))
		if v == "" {
			return def
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || (integer && f != float64(int(f))) {
			errs = append(errs, fmt.Errorf("%s=%q: want a positive number (whole for a count)", key, v))
			return def
		}
		return f
	}
	str := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	o := Options{Log: os.Stderr}
	shm := str(EnvTmpDir, os.TempDir())
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		shm = "/dev/shm"
	}
	fs := flag.NewFlagSet("wcache-bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.BinDir, "bin", "bin", "")
	fs.StringVar(&o.RepoDir, "repo", ".", "")
	fs.StringVar(&o.OutDir, "out", str(EnvOut, "bench-results"), "")
	fs.StringVar(&o.TmpDir, "tmpdir", str(EnvTmpDir, os.TempDir()), "")
	fs.StringVar(&o.ShmDir, "shmdir", shm, "")
	gib := fs.Float64("gib", env(EnvGiB, 4, false), "")
	smallMiB := fs.Float64("small-mib", env(EnvSmallMiB, 256, false), "")
	fs.IntVar(&o.FewTensors, "few-tensors", 300, "")
	fs.IntVar(&o.ManyTensors, "many-tensors", 3000, "")
	fs.IntVar(&o.Repeats, "repeats", int(env(EnvRepeats, 5, true)), "")
	fs.IntVar(&o.AttachIters, "attach-iters", int(env(EnvAttachIters, 300, true)), "")
	fs.IntVar(&o.Clients, "clients", int(env(EnvClients, 64, true)), "")
	secs := fs.Float64("seconds", env(EnvSeconds, 10, false), "")
	fs.StringVar(&o.Python, "python", str(EnvPython, "/usr/bin/python3"), "")
	only := fs.String("only", str(EnvOnly, ""), "")
	fs.BoolVar(&o.Cold, "cold", true, "")
	fs.StringVar(&o.MicroBenchtime, "benchtime", "1s", "")
	fs.BoolVar(&o.Keep, "keep", false, "")
	if err := fs.Parse(args); err != nil {
		return Options{}, fmt.Errorf("wcache-bench: %w", err)
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	o.Scenarios = scenarioNames()
	if *only != "" {
		o.Scenarios = nil
		for s := range strings.SplitSeq(*only, ",") {
			if s = strings.TrimSpace(s); !slices.Contains(scenarioNames(), s) {
				errs = append(errs, fmt.Errorf("unknown scenario %q (want %s)", s, strings.Join(scenarioNames(), ", ")))
			}
			o.Scenarios = append(o.Scenarios, s)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		errs = append(errs, fmt.Errorf("own executable: %w", err))
	}
	if len(errs) > 0 {
		return Options{}, fmt.Errorf("wcache-bench: %w", errors.Join(errs...))
	}
	o.HelperArgv = []string{exe, HelperCommand}
	o.LargeBytes, o.SmallBytes = uint64(*gib*(1<<30)), uint64(*smallMiB*(1<<20))
	o.ConcurrencyDuration = time.Duration(*secs * float64(time.Second))
	return o, o.validate()
}

func (o Options) validate() error {
	switch {
	case o.SmallBytes < 1<<20:
		return fmt.Errorf("wcache-bench: small checkpoint of %d bytes: want at least 1 MiB", o.SmallBytes)
	case o.LargeBytes < o.SmallBytes:
		return fmt.Errorf("wcache-bench: large checkpoint (%d bytes) smaller than the small one (%d bytes)", o.LargeBytes, o.SmallBytes)
	case o.FewTensors < extraTensors+tensorsPerLayer || o.ManyTensors < o.FewTensors:
		return fmt.Errorf("wcache-bench: tensor counts %d and %d: want %d ≤ few ≤ many", o.FewTensors, o.ManyTensors, extraTensors+tensorsPerLayer)
	case o.Repeats < 1 || o.AttachIters < 1 || o.Clients < 1 || o.ConcurrencyDuration <= 0:
		return errors.New("wcache-bench: repeats, attach-iters, clients and seconds must be positive")
	}
	return nil
}

// logf writes a progress line.
func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "wcache-bench: "+format+"\n", args...)
	}
}
