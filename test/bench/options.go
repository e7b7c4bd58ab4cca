package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/wcache/wcache/test/testproc"
)

// EnvVar is the environment variable of a flag among envFlags:
// WCACHE_BENCH_ and the flag's name in capitals, "_" for "-"
// (WCACHE_BENCH_SMALL_MIB sets -small-mib). A flag wins over its variable.
func EnvVar(flag string) string {
	return "WCACHE_BENCH_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// envFlags are the flags an environment variable can set.
func envFlags() []string {
	return []string{"out", "tmpdir", "gib", "small-mib", "hash-mib", "repeats", "attach-iters", "clients", "seconds", "python", "only"}
}

// Options configure a benchmark run. ParseOptions fills them from the
// flags (flagSet says which flag sets each field, and its default): where
// the binaries and the sources are, where to write, where checkpoints and
// shared memory go, the checkpoints' sizes and tensor counts, the repeats,
// the concurrency run, the Python interpreter, the scenarios to run and
// the baseline build's binaries and revision (scenario baseline).
// HelperArgv starts a fresh helper process (this executable, "helper"),
// to which a mode and its flags are appended; HelperEnv is extra
// environment for helpers; Log receives progress lines.
type Options struct {
	BinDir, RepoDir, OutDir, TmpDir, ShmDir  string
	BaselineDir, BaselineRev                 string
	LargeBytes, SmallBytes, HashBytes        uint64
	FewTensors, ManyTensors, IdentityTensors int
	Repeats, AttachIters, Clients            int
	ConcurrencyDuration                      time.Duration
	Python, MicroBenchtime                   string
	Scenarios                                []string
	Cold                                     bool
	HelperArgv, HelperEnv                    []string
	Log                                      io.Writer
}

// scaled are the flags that Options hold in other units.
type scaled struct {
	gib, smallMiB, hashMiB, seconds float64
	only                            string
	quick                           bool
}

// quickValues are the flags' values under -quick, a smoke run of every
// scenario in minutes (a flag or variable still wins).
func quickValues() [][2]string {
	return [][2]string{{"gib", "0.25"}, {"small-mib", "32"}, {"hash-mib", "64"}, {"identity-tensors", "20000"},
		{"repeats", "2"}, {"attach-iters", "30"}, {"clients", "8"}, {"seconds", "1"}, {"benchtime", "100ms"}}
}

// flagSet defines the command line into o and s.
func flagSet(o *Options, s *scaled) *flag.FlagSet {
	fs := flag.NewFlagSet("wcache-bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.BinDir, "bin", "bin", "`DIR` of wcache, wcache-backend-mock and (pipeline) wcache-backend-cuda")
	fs.StringVar(&o.BaselineDir, "baseline", "", "`DIR` of a baseline build's wcache and wcache-backend-mock (make bench BASELINE=rev); empty: no baseline")
	fs.StringVar(&o.BaselineRev, "baseline-rev", "", "the revision -baseline was built from, for the report")
	fs.StringVar(&o.RepoDir, "repo", ".", "source tree: git commit, clients/python/src, micro-benchmarks")
	fs.StringVar(&o.OutDir, "out", "bench-results", "results folder")
	fs.StringVar(&o.TmpDir, "tmpdir", os.TempDir(), "where checkpoints are generated, a disk")
	fs.StringVar(&o.ShmDir, "shmdir", "", "parent of the mock's shared-memory folders (default /dev/shm, else -tmpdir)")
	fs.Float64Var(&s.gib, "gib", 4, "large checkpoint, GiB")
	fs.Float64Var(&s.smallMiB, "small-mib", 256, "small checkpoint, MiB")
	fs.Float64Var(&s.hashMiB, "hash-mib", 512, "unknown copy hashed by the content scenario, MiB")
	fs.IntVar(&o.FewTensors, "few-tensors", 300, "small manifest")
	fs.IntVar(&o.ManyTensors, "many-tensors", 3000, "large manifest")
	fs.IntVar(&o.IdentityTensors, "identity-tensors", 100000, "checkpoint of the Python identity step (content)")
	fs.IntVar(&o.Repeats, "repeats", 5, "fresh processes / serve runs per variant")
	fs.IntVar(&o.AttachIters, "attach-iters", 300, "timed attaches per manifest")
	fs.IntVar(&o.Clients, "clients", 64, "concurrent clients")
	fs.Float64Var(&s.seconds, "seconds", 10, "concurrency run length, s")
	fs.StringVar(&o.Python, "python", "/usr/bin/python3", "interpreter with numpy and torch")
	fs.StringVar(&s.only, "only", "", "scenarios, comma-separated: "+strings.Join(scenarioNames(), ","))
	fs.BoolVar(&o.Cold, "cold", true, "also fill page-cache-cold (needs root to drop caches)")
	fs.StringVar(&o.MicroBenchtime, "benchtime", "1s", "-benchtime of the micro-benchmarks")
	var quick []string
	for _, q := range quickValues() {
		quick = append(quick, "-"+q[0]+" "+q[1])
	}
	fs.BoolVar(&s.quick, "quick", false, "a smoke run of every scenario in minutes: "+strings.Join(quick, " ")+" (a flag or variable wins)")
	for _, name := range envFlags() {
		fs.Lookup(name).Usage += " [" + EnvVar(name) + "]"
	}
	return fs
}

// Usage is the help text, with every flag's default.
func Usage() string {
	fs := flagSet(&Options{}, &scaled{})
	var b strings.Builder
	b.WriteString("usage: wcache-bench [flags]\n       wcache-bench render [-in JSON] [-out MD] [-template FILE]\n\n" +
		"Runs the wcache benchmarks against the binaries in -bin (make build) and writes OUT/benchmarks.json;\n" +
		"it modifies nothing else. render fills the docs template (test/bench/benchmarks.md.tmpl) from such a\n" +
		"report. Flags [environment]:\n\n")
	fs.SetOutput(&b)
	fs.PrintDefaults()
	return b.String()
}

// ParseOptions reads flags from args over the environment (getenv; nil is
// os.Getenv) over -quick over the defaults. A malformed value is an error
// naming the flag or variable.
func ParseOptions(args []string, getenv func(string) string) (Options, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	o, s := Options{Log: os.Stderr}, scaled{}
	fs := flagSet(&o, &s)
	if err := fs.Parse(args); err != nil {
		return Options{}, fmt.Errorf("wcache-bench: %w", err)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, q := range quickValues() {
		if s.quick && !set[q[0]] && (!slices.Contains(envFlags(), q[0]) || getenv(EnvVar(q[0])) == "") {
			_ = fs.Set(q[0], q[1])
		}
	}
	for _, name := range envFlags() {
		key := EnvVar(name)
		if val := strings.TrimSpace(getenv(key)); val != "" && !set[name] {
			if err := fs.Set(name, val); err != nil || !positive(fs.Lookup(name)) {
				errs = append(errs, fmt.Errorf("%s=%q: want a positive number (whole for a count)", key, val))
			}
		}
	}
	if o.ShmDir == "" {
		o.ShmDir = o.TmpDir
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			o.ShmDir = "/dev/shm"
		}
	}
	o.Scenarios = scenarioNames()
	if s.only != "" {
		o.Scenarios = nil
		for name := range strings.SplitSeq(s.only, ",") {
			if name = strings.TrimSpace(name); !slices.Contains(scenarioNames(), name) {
				errs = append(errs, fmt.Errorf("unknown scenario %q (want %s)", name, strings.Join(scenarioNames(), ", ")))
			}
			o.Scenarios = append(o.Scenarios, name)
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
	o.LargeBytes, o.SmallBytes, o.HashBytes = uint64(s.gib*(1<<30)), uint64(s.smallMiB*(1<<20)), uint64(s.hashMiB*(1<<20))
	o.ConcurrencyDuration = time.Duration(s.seconds * float64(time.Second))
	return o, o.validate()
}

// positive reports whether a numeric flag holds a number above 0 (other
// flags always do).
func positive(f *flag.Flag) bool {
	switch x := f.Value.(flag.Getter).Get().(type) {
	case int:
		return x > 0
	case float64:
		return x > 0
	}
	return true
}

func (o Options) validate() error {
	switch {
	case o.SmallBytes < 1<<20 || o.HashBytes < 1<<20:
		return fmt.Errorf("wcache-bench: small checkpoint of %d bytes, hashed copy of %d: want at least 1 MiB", o.SmallBytes, o.HashBytes)
	case o.LargeBytes < o.SmallBytes:
		return fmt.Errorf("wcache-bench: large checkpoint (%d bytes) smaller than the small one (%d bytes)", o.LargeBytes, o.SmallBytes)
	case o.FewTensors < testproc.MinTensors || o.ManyTensors < o.FewTensors || o.IdentityTensors < o.FewTensors:
		return fmt.Errorf("wcache-bench: tensor counts %d, %d and %d: want %d ≤ few ≤ many, identity", o.FewTensors,
			o.ManyTensors, o.IdentityTensors, testproc.MinTensors)
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
