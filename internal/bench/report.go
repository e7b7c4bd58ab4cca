package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// ReportSchema is the version of the JSON report's layout: 3 keeps every
// scenario's figures under results.<scenario> and the targets in one list.
const ReportSchema = 3

// Report is everything one benchmark run measured.
type Report struct {
	Schema    int       `json:"schema"`
	Generated time.Time `json:"generated"`
	Machine   Machine   `json:"machine"`
	Commit    Commit    `json:"commit"`
	Settings  Settings  `json:"settings"`
	// Models are the generated checkpoints, with their generation times.
	Models []GeneratedModel `json:"models"`
	// Results are each scenario's figures, by scenario name.
	Results map[string]any `json:"results"`
	Targets []Target       `json:"targets"`
	// Seconds is the run's total wall time.
	Seconds float64 `json:"seconds"`
	// Note is a remark added by hand to a report (never by a run), shown
	// at the top of the docs.
	Note string `json:"note,omitempty"`
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

// atLeast is a Target that value ≥ goal.
func atLeast(metric string, value, goal float64, unit string) Target {
	return Target{Metric: metric, Goal: "≥ " + num(goal), Value: sig4(value), Unit: unit, Met: value >= goal}
}

// atMost is a Target that value ≤ goal.
func atMost(metric string, value, goal float64, unit string) Target {
	return Target{Metric: metric, Goal: "≤ " + num(goal), Value: sig4(value), Unit: unit, Met: value <= goal}
}

// reported is a figure with no goal of its own.
func reported(metric string, value float64, unit string) Target {
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
		err = os.WriteFile(path, append(b, '\n'), 0o644)
	}
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
