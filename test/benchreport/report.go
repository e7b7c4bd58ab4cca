package benchreport

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/test/testproc"
)

// Report is everything one benchmark run measured: the generated
// checkpoints (Models), each scenario's figures by name (Results), the
// targets, the run's wall time (Seconds), and Note, a remark added to a
// report by hand (never by a run) and shown at the top of the docs.
type Report struct {
	Schema    int              `json:"schema"`
	Generated time.Time        `json:"generated"`
	Machine   Machine          `json:"machine"`
	Commit    Commit           `json:"commit"`
	Settings  Settings         `json:"settings"`
	Models    []GeneratedModel `json:"models"`
	Results   map[string]any   `json:"results"`
	Targets   []Target         `json:"targets"`
	Seconds   float64          `json:"seconds"`
	Note      string           `json:"note,omitempty"`
}

// Settings echo the options that shape the figures.
type Settings struct {
	LargeBytes          uint64   `json:"large_bytes"`
	SmallBytes          uint64   `json:"small_bytes"`
	FewTensors          int      `json:"few_tensors"`
	ManyTensors         int      `json:"many_tensors"`
	Repeats             int      `json:"repeats"`
	AttachIters         int      `json:"attach_iters"`
	Clients             int      `json:"clients"`
	ConcurrencySeconds  float64  `json:"concurrency_seconds"`
	Scenarios           []string `json:"scenarios"`
	CheckpointOnTmpfs   bool     `json:"checkpoint_on_tmpfs"`
	SharedMemoryDirRoot string   `json:"shm_dir"`
}

// GeneratedModel is a checkpoint the run generated.
type GeneratedModel struct {
	testproc.Model
	Name            string  `json:"name"`
	GenerateSeconds float64 `json:"generate_seconds"`
}

// Target is one goal and what was measured for it. Goal is "≥ x", "≤ x",
// or "reported" for a figure shown beside the targets without one of its
// own (Met is then true).
type Target struct {
	Scenario string  `json:"scenario"`
	Metric   string  `json:"metric"`
	Goal     string  `json:"goal"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Met      bool    `json:"met"`
}

// AtLeast is a Target that value ≥ goal.
func AtLeast(metric string, value, goal float64, unit string) Target {
	return Target{Metric: metric, Goal: "≥ " + num(goal), Value: sig4(value), Unit: unit, Met: value >= goal}
}

// AtMost is a Target that value ≤ goal.
func AtMost(metric string, value, goal float64, unit string) Target {
	return Target{Metric: metric, Goal: "≤ " + num(goal), Value: sig4(value), Unit: unit, Met: value <= goal}
}

// Reported is a figure with no goal of its own.
func Reported(metric string, value float64, unit string) Target {
	return Target{Metric: metric, Goal: "reported", Value: sig4(value), Unit: unit, Met: true}
}

// num formats x with 4 significant digits, without exponent.
func num(x float64) string { return strconv.FormatFloat(sig4(x), 'f', -1, 64) }

// sig4 rounds x to 4 significant digits.
func sig4(x float64) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	f, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 4, 64), 64)
	return f
}

// WriteJSON writes r as indented JSON to path, creating its folder.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err == nil {
		err = os.MkdirAll(filepath.Dir(path), 0o755)
	}
	if err == nil {
		return os.WriteFile(path, append(b, '\n'), 0o644)
	}
	return fmt.Errorf("write report: %w", err)
}

// Summary describes a sample of durations in milliseconds.
type Summary struct {
	N        int     `json:"n"`
	MedianMS float64 `json:"median_ms"`
	P99MS    float64 `json:"p99_ms"`
	MinMS    float64 `json:"min_ms"`
	MaxMS    float64 `json:"max_ms"`
}

// Summarize computes the median, the 99th percentile (nearest rank: the
// smallest value with at least 99% of the sample at or below it) and the
// extremes of ds. An empty sample is the zero Summary.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := min(max(int(math.Ceil(0.99*float64(len(s)))), 1), len(s))
	return Summary{N: len(s), MedianMS: MS(Median(s)), P99MS: MS(s[rank-1]), MinMS: MS(s[0]), MaxMS: MS(s[len(s)-1])}
}

// Median of a sample: the middle value, or the mean of the two middle
// values (0 when empty).
func Median[T time.Duration | float64](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	switch n := len(s); {
	case n == 0:
		return 0
	case n%2 == 1:
		return s[n/2]
	default:
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// Machine describes where the benchmark ran. Load1 is the one-minute load
// average when the run began (above Cores, other work shared the
// machine); Virtualized the hypervisor flag of /proc/cpuinfo ("cold" reads
// may then come from the host's cache); ShmemTHP the kernel's
// transparent-huge-page mode for shared memory ("" when unreadable; with
// "never", tmpfs hands out 4 KiB pages one at a time).
type Machine struct {
	CPUModel    string  `json:"cpu_model"`
	Cores       int     `json:"cores"`
	MemoryBytes uint64  `json:"memory_bytes"`
	Kernel      string  `json:"kernel"`
	OS          string  `json:"os"`
	GoVersion   string  `json:"go_version"`
	Load1       float64 `json:"load1"`
	Virtualized bool    `json:"virtualized"`
	ShmemTHP    string  `json:"shmem_thp,omitempty"`
}

// Commit is the source the benchmark was built from.
type Commit struct {
	Hash  string `json:"hash"`
	Dirty bool   `json:"dirty"`
}

// ReadMachine describes this machine from /proc and uname. Fields it cannot
// read are left empty rather than failing the run.
func ReadMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version()}
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if cpus, err := fs.CPUInfo(); err == nil && len(cpus) > 0 {
			m.CPUModel, m.Virtualized = cpus[0].ModelName, slices.Contains(cpus[0].Flags, "hypervisor")
		}
		if mi, err := fs.Meminfo(); err == nil && mi.MemTotalBytes != nil {
			m.MemoryBytes = *mi.MemTotalBytes
		}
		if la, err := fs.LoadAvg(); err == nil {
			m.Load1 = la.Load1
		}
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		m.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) +
			" " + unix.ByteSliceToString(u.Machine[:])
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/shmem_enabled"); err == nil {
		m.ShmemTHP = selectedMode(string(b))
	}
	return m
}

// selectedMode is the bracketed choice of a sysfs mode list such as
// "always within_size advise [never] deny force" ("" when none is).
func selectedMode(s string) string {
	_, after, _ := strings.Cut(s, "[")
	mode, _, _ := strings.Cut(after, "]")
	return mode
}

// ReadCommit asks git in dir for HEAD and whether the tree has changes
// (tracked or untracked files).
func ReadCommit(ctx context.Context, dir string) (Commit, error) {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s in %s: %w", strings.Join(args, " "), dir, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	hash, err := git("rev-parse", "HEAD")
	var st string
	if err == nil {
		st, err = git("status", "--porcelain", "--", ".")
	}
	return Commit{Hash: hash, Dirty: st != ""}, err
}

// MS converts d to float milliseconds.
func MS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
