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

// Environment variables read by ParseOptions (a flag of the same meaning
// wins over its variable).
const (
	EnvGiB         = "WCACHE_BENCH_GIB"          // large checkpoint size in GiB [4]
	EnvSmallMiB    = "WCACHE_BENCH_SMALL_MIB"    // small checkpoint size in MiB [256]
	EnvRepeats     = "WCACHE_BENCH_REPEATS"      // fresh-process and serve repetitions [5]
	EnvAttachIters = "WCACHE_BENCH_ATTACH_ITERS" // attaches per manifest for p50/p99 [300]
	EnvClients     = "WCACHE_BENCH_CLIENTS"      // concurrent clients [64]
	EnvSeconds     = "WCACHE_BENCH_SECONDS"      // concurrency run length in seconds [10]
	EnvTmpDir      = "WCACHE_BENCH_TMPDIR"       // where checkpoints are generated [os.TempDir()]
	EnvPython      = "WCACHE_BENCH_PYTHON"       // interpreter with numpy and torch [/usr/bin/python3]
	EnvOnly        = "WCACHE_BENCH_ONLY"         // comma list of scenarios [all]
	EnvOut         = "WCACHE_BENCH_OUT"          // results folder [bench-results]
)

// Options configure a benchmark run. ParseOptions fills the defaults shown
// in brackets.
type Options struct {
	// BinDir holds wcache and wcache-backend-mock [bin].
	BinDir string
	// RepoDir is the source tree: git identifies the commit there, the
	// Python client is imported from RepoDir/clients/python/src and the Go
	// micro-benchmarks run there [.].
	RepoDir string
	// OutDir is the results folder; the run writes OutDir/benchmarks.json
	// and nothing else [$WCACHE_BENCH_OUT, else bench-results].
	OutDir string
	// TmpDir is where checkpoints are generated; it should be a disk, not
	// tmpfs, so that a cold read means something [$WCACHE_BENCH_TMPDIR, else os.TempDir()].
	TmpDir string
	// ShmDir is the parent of each scenario's mock shared-memory folder
	// [/dev/shm when present, else TmpDir].
	ShmDir string
	// LargeBytes and SmallBytes are the two checkpoint sizes [4 GiB, 256 MiB].
	LargeBytes, SmallBytes uint64
	// FewTensors and ManyTensors are the two manifest sizes [300, 3000].
	FewTensors, ManyTensors int
	// Repeats is the number of fresh processes per restart variant and of
	// serve runs per fill and start-up case [5].
	Repeats int
	// AttachIters is the number of timed attaches per manifest [300].
	AttachIters int
	// Clients and ConcurrencyDuration shape the concurrency run [64, 10 s].
	Clients             int
	ConcurrencyDuration time.Duration
	// Python is the interpreter of the Python scenarios [/usr/bin/python3].
	Python string
	// Scenarios to run, by name [all, in the order of Scenarios()].
	Scenarios []string
	// Cold tries a page-cache-cold fill (drop_caches, needs root) [true].
	Cold bool
	// MicroBenchtime is -benchtime of the hot paths' Go benchmarks [1s].
	MicroBenchtime string
	// Keep leaves the generated checkpoints behind [false].
	Keep bool
	// HelperArgv starts a fresh helper process; the helper mode and its
	// flags are appended [this executable, "helper"].
	HelperArgv []string
	// HelperEnv is extra environment for helper processes.
	HelperEnv []string
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
	envFloat := func(key string, def float64) float64 {
		v := strings.TrimSpace(getenv(key))
		if v == "" {
			return def
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want a positive number", key, v))
			return def
		}
		return f
	}
	envInt := func(key string, def int) int {
		f := envFloat(key, float64(def))
		if f != float64(int(f)) {
			errs = append(errs, fmt.Errorf("%s=%v: want a positive integer", key, f))
		}
		return int(f)
	}
	envStr := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	tmp := envStr(EnvTmpDir, os.TempDir())
	shm := tmp
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		shm = "/dev/shm"
	}

	fs := flag.NewFlagSet("wcache-bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := Options{Log: os.Stderr, MicroBenchtime: "1s"}
	fs.StringVar(&o.BinDir, "bin", "bin", "")
	fs.StringVar(&o.RepoDir, "repo", ".", "")
	fs.StringVar(&o.OutDir, "out", envStr(EnvOut, "bench-results"), "")
	fs.StringVar(&o.TmpDir, "tmpdir", tmp, "")
	fs.StringVar(&o.ShmDir, "shmdir", shm, "")
	gib := fs.Float64("gib", envFloat(EnvGiB, 4), "")
	smallMiB := fs.Float64("small-mib", envFloat(EnvSmallMiB, 256), "")
	fs.IntVar(&o.FewTensors, "few-tensors", 300, "")
	fs.IntVar(&o.ManyTensors, "many-tensors", 3000, "")
	fs.IntVar(&o.Repeats, "repeats", envInt(EnvRepeats, 5), "")
	fs.IntVar(&o.AttachIters, "attach-iters", envInt(EnvAttachIters, 300), "")
	fs.IntVar(&o.Clients, "clients", envInt(EnvClients, 64), "")
	secs := fs.Float64("seconds", envFloat(EnvSeconds, 10), "")
	fs.StringVar(&o.Python, "python", envStr(EnvPython, "/usr/bin/python3"), "")
	only := fs.String("only", envStr(EnvOnly, ""), "")
	fs.BoolVar(&o.Cold, "cold", true, "")
	fs.StringVar(&o.MicroBenchtime, "benchtime", "1s", "")
	fs.BoolVar(&o.Keep, "keep", false, "")
	if err := fs.Parse(args); err != nil {
		return Options{}, fmt.Errorf("wcache-bench: %w", err)
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if len(errs) > 0 {
		return Options{}, fmt.Errorf("wcache-bench: %w", errors.Join(errs...))
	}
	exe, err := os.Executable()
	if err != nil {
		return Options{}, fmt.Errorf("wcache-bench: own executable: %w", err)
	}
	o.HelperArgv = []string{exe, HelperCommand}
	o.LargeBytes = uint64(*gib * (1 << 30))
	o.SmallBytes = uint64(*smallMiB * (1 << 20))
	o.ConcurrencyDuration = time.Duration(*secs * float64(time.Second))
	names := scenarioNames()
	o.Scenarios = names
	if *only != "" {
		o.Scenarios = nil
		for s := range strings.SplitSeq(*only, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(names, s) {
				return Options{}, fmt.Errorf("wcache-bench: unknown scenario %q (want %s)", s, strings.Join(names, ", "))
			}
			o.Scenarios = append(o.Scenarios, s)
		}
	}
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
