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
)

// Scenario names, in run order.
const (
	ScenarioRestart     = "restart"
	ScenarioAttach      = "attach"
	ScenarioFill        = "fill"
	ScenarioConcurrency = "concurrency"
	ScenarioStartup     = "startup"
	ScenarioMicro       = "micro"
)

// AllScenarios lists every scenario in run order. Footprint figures come
// from the fill and concurrency runs; GPU rows are never measured here.
func AllScenarios() []string {
	return []string{ScenarioRestart, ScenarioAttach, ScenarioFill, ScenarioConcurrency, ScenarioStartup, ScenarioMicro}
}

// Options configure a benchmark run. ParseOptions fills the defaults shown
// in brackets.
type Options struct {
	// BinDir holds wcache and wcache-backend-mock [bin].
	BinDir string
	// RepoDir is the source tree: git identifies the commit there, and the
	// Python client is imported from RepoDir/clients/python/src [.].
	RepoDir string
	// OutMarkdown and OutJSON are the reports written
	// [docs/benchmarks.md, docs/benchmarks.json].
	OutMarkdown, OutJSON string
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
	// serve runs per fill variant [5].
	Repeats int
	// AttachIters is the number of timed attaches per manifest [300].
	AttachIters int
	// Clients and ConcurrencyDuration shape the concurrency run [64, 10 s].
	Clients             int
	ConcurrencyDuration time.Duration
	// Python is the interpreter of the Python scenarios [/usr/bin/python3].
	Python string
	// Scenarios to run [all].
	Scenarios []string
	// Cold tries a page-cache-cold fill (drop_caches, needs root) [true].
	Cold bool
	// Profile captures and summarises a CPU profile of the slow path when a
	// target is missed [true].
	Profile bool
	// MicroBenchtime is -benchtime of the hot paths' Go benchmarks [1s].
	MicroBenchtime string
	// ProfileLoop is how long a loop of short operations (attaches) is
	// profiled [3 s].
	ProfileLoop time.Duration
	// RenderOnly rewrites OutMarkdown from the report in OutJSON without
	// running anything [false].
	RenderOnly bool
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
		v := strings.TrimSpace(getenv(key))
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want a positive integer", key, v))
			return def
		}
		return n
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
	o := Options{Log: os.Stderr, ProfileLoop: 3 * time.Second, MicroBenchtime: "1s"}
	fs.StringVar(&o.BinDir, "bin", "bin", "directory holding wcache and wcache-backend-mock")
	fs.StringVar(&o.RepoDir, "repo", ".", "source tree (git commit, Python client)")
	fs.StringVar(&o.OutMarkdown, "out-md", "docs/benchmarks.md", "Markdown report to write")
	fs.StringVar(&o.OutJSON, "out-json", "docs/benchmarks.json", "JSON report to write")
	fs.StringVar(&o.TmpDir, "tmpdir", tmp, "where checkpoints are generated (a disk, not tmpfs) [$"+EnvTmpDir+"]")
	fs.StringVar(&o.ShmDir, "shmdir", shm, "parent of the mock backend's shared-memory folders")
	gib := fs.Float64("gib", envFloat(EnvGiB, 4), "large checkpoint size in GiB [$"+EnvGiB+"]")
	smallMiB := fs.Float64("small-mib", envFloat(EnvSmallMiB, 256), "small checkpoint size in MiB [$"+EnvSmallMiB+"]")
	fs.IntVar(&o.FewTensors, "few-tensors", 300, "tensor count of the small manifest")
	fs.IntVar(&o.ManyTensors, "many-tensors", 3000, "tensor count of the large manifest")
	fs.IntVar(&o.Repeats, "repeats", envInt(EnvRepeats, 5), "fresh processes / serve runs per variant [$"+EnvRepeats+"]")
	fs.IntVar(&o.AttachIters, "attach-iters", envInt(EnvAttachIters, 300), "timed attaches per manifest [$"+EnvAttachIters+"]")
	fs.IntVar(&o.Clients, "clients", envInt(EnvClients, 64), "concurrent clients [$"+EnvClients+"]")
	secs := fs.Float64("seconds", envFloat(EnvSeconds, 10), "concurrency run length in seconds [$"+EnvSeconds+"]")
	fs.StringVar(&o.Python, "python", envStr(EnvPython, "/usr/bin/python3"), "Python with numpy and torch [$"+EnvPython+"]")
	only := fs.String("only", envStr(EnvOnly, ""), "comma list of scenarios (default all) [$"+EnvOnly+"]: "+strings.Join(AllScenarios(), ","))
	fs.BoolVar(&o.Cold, "cold", true, "measure a page-cache-cold fill too (drop_caches, needs root)")
	fs.BoolVar(&o.Profile, "profile", true, "profile the slow path when a target is missed")
	fs.BoolVar(&o.Keep, "keep", false, "keep the generated checkpoints")
	fs.BoolVar(&o.RenderOnly, "render-only", false, "rewrite -out-md from -out-json without running anything")
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
	o.Scenarios = AllScenarios()
	if *only != "" {
		o.Scenarios = nil
		for s := range strings.SplitSeq(*only, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(AllScenarios(), s) {
				return Options{}, fmt.Errorf("wcache-bench: unknown scenario %q (want %s)", s, strings.Join(AllScenarios(), ", "))
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

// runs reports whether scenario s is selected.
func (o Options) runs(s string) bool { return slices.Contains(o.Scenarios, s) }

// logf writes a progress line.
func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "wcache-bench: "+format+"\n", args...)
	}
}
