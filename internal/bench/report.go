package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// ReportSchema is the version of the JSON report's layout.
const ReportSchema = 2

// Report is everything one benchmark run measured.
type Report struct {
	Schema    int       `json:"schema"`
	Generated time.Time `json:"generated"`
	Machine   Machine   `json:"machine"`
	Commit    Commit    `json:"commit"`
	// Settings are the sizes and counts the run used.
	Settings Settings `json:"settings"`
	// Models are the generated checkpoints, with their generation times.
	Models []GeneratedModel `json:"models"`

	Restart     *RestartResult     `json:"restart,omitempty"`
	Attach      *AttachResult      `json:"attach,omitempty"`
	Fill        *FillResult        `json:"fill,omitempty"`
	Concurrency *ConcurrencyResult `json:"concurrency,omitempty"`
	Footprint   *FootprintResult   `json:"footprint,omitempty"`
	Startup     *StartupResult     `json:"startup,omitempty"`
	Micro       *MicroResult       `json:"micro,omitempty"`
	GPU         GPUResult          `json:"gpu"`

	Checks   []Check   `json:"checks"`
	Findings []Finding `json:"findings"`
	Notes    []string  `json:"notes"`
	// Seconds is the run's total wall time.
	Seconds float64 `json:"seconds"`
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
	Model
	Name            string  `json:"name"`
	GenerateSeconds float64 `json:"generate_seconds"`
}

// GPUResult is row 7: never measured by this harness (it runs the mock
// backend); each row says so rather than carrying a made-up figure.
type GPUResult struct {
	Measured bool     `json:"measured"`
	Rows     []string `json:"rows"`
	Note     string   `json:"note"`
}

// gpuRows are the figures only a GPU run gives.
func gpuRows() []string {
	return []string{
		"fill of wcache serve --backend cuda (file → pinned staging → device) against the pinned host-to-device peak",
		"attach latency with cuda-ipc handles",
		"first use of cuda-ipc tensors in a fresh PyTorch process (cuIpcOpenMemHandle per arena)",
		"device memory beyond the weights (arena padding, staging buffers)",
	}
}

// Finding explains a missed target: why, and where the time goes.
type Finding struct {
	Check string `json:"check"`
	Why   string `json:"why"`
	// Profile is the top of a CPU profile of the slow path ("" when none
	// was taken), as `go tool pprof -top` prints it.
	ProfileWhat string `json:"profile_what,omitempty"`
	Profile     string `json:"profile,omitempty"`
}

// gpuNote is the text of row 7.
const gpuNote = "not measured — there is no GPU on this machine. scripts/gpu-check.sh (the CUDA backend's check, run " +
	"from `make gpu-bundle` on a GPU machine) measures them: serve's load rate against the pinned H2D peak, attach " +
	"latency, and a PyTorch import of every tensor from its cuda-ipc handle, into gpu-results.json"

// WriteJSON writes r as indented JSON to path (through a temporary file).
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	return writeAtomic(path, append(b, '\n'))
}

// ReadReport reads a report written by WriteJSON.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read report %s: %w", path, err)
	}
	if r.Schema != ReportSchema {
		return nil, fmt.Errorf("read report %s: schema %d, this harness writes %d", path, r.Schema, ReportSchema)
	}
	return &r, nil
}

// WriteMarkdown writes r as Markdown to path.
func (r *Report) WriteMarkdown(path string) error {
	return writeAtomic(path, []byte(r.Markdown()))
}

// writeAtomic writes data to path through a temporary file in its folder.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
