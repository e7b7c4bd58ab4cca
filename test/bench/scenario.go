package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// A Scenario is one measurement. Run measures against the binaries and
// checkpoints of Env and returns its figures, any JSON-encodable value
// stored under Name in the report's results, and the targets it checks.
// A scenario that cannot measure returns an error: figures are never made
// up. Adding a measurement is a file with its Run and one line in
// Scenarios (and, to show it, a section in the docs template).
type Scenario struct {
	Name string
	Run  func(ctx context.Context, e *Env) (any, []Target, error)
}

// Scenarios lists every scenario, in run order.
func Scenarios() []Scenario {
	return []Scenario{
		{"restart", runRestart},
		{"fill", runFill},
		{"publish", runPublish},
		{"pipeline", runPipeline},
		{"attach", runAttach},
		{"concurrency", runConcurrency},
		{"startup", runStartup},
		{"takeover", runTakeover},
		{"micro", runMicro},
		{"generations", runGenerations},
	}
}

func scenarioNames() []string {
	var out []string
	for _, s := range Scenarios() {
		out = append(out, s.Name)
	}
	return out
}

// Env is what scenarios share: the options (BinDir pointing at a snapshot
// of the binaries) and the generated checkpoints.
type Env struct {
	Options
	dir    string
	models map[ModelSpec]*Model
	// generated are the checkpoints made so far, for the report.
	generated []GeneratedModel
}

// The four checkpoints scenarios ask for.
func (e *Env) largeFew() ModelSpec  { return ModelSpec{Bytes: e.LargeBytes, Tensors: e.FewTensors} }
func (e *Env) largeMany() ModelSpec { return ModelSpec{Bytes: e.LargeBytes, Tensors: e.ManyTensors} }
func (e *Env) smallFew() ModelSpec  { return ModelSpec{Bytes: e.SmallBytes, Tensors: e.FewTensors} }
func (e *Env) smallMany() ModelSpec { return ModelSpec{Bytes: e.SmallBytes, Tensors: e.ManyTensors} }

// Model returns the checkpoint of spec, generating it the first time.
func (e *Env) Model(spec ModelSpec) (*Model, error) {
	if m, ok := e.models[spec]; ok {
		return m, nil
	}
	e.logf("generating a %d MiB checkpoint of %d tensors in %s", spec.Bytes>>20, spec.Tensors, e.dir)
	m, took, err := GenerateModel(e.dir, spec)
	if err != nil {
		return nil, err
	}
	e.models[spec] = m
	e.generated = append(e.generated, GeneratedModel{Model: *m, Name: spec.Name(), GenerateSeconds: round3(took.Seconds())})
	return m, nil
}

// warmModel is Model with the checkpoint read once, untimed, so that its
// files are in the page cache.
func (e *Env) warmModel(spec ModelSpec) (*Model, error) {
	m, err := e.Model(spec)
	if err == nil {
		_, _, err = sequentialRead(m.Files)
	}
	return m, err
}

// dropModel removes a checkpoint (to bound the disk and page cache in use).
func (e *Env) dropModel(spec ModelSpec) {
	if m, ok := e.models[spec]; ok {
		_ = os.RemoveAll(m.Dir)
		delete(e.models, spec)
	}
}

// Run runs the selected scenarios and returns the report; it writes
// nothing. The first scenario that fails stops the run with its error; a
// missed target is a Target with Met false, not an error.
func Run(ctx context.Context, o Options) (*Report, error) {
	began := time.Now()
	r := &Report{Schema: ReportSchema, Generated: began.UTC().Truncate(time.Second), Machine: ReadMachine(),
		Results: map[string]any{}}
	var err error
	if r.Commit, err = ReadCommit(ctx, o.RepoDir); err != nil {
		return nil, err
	}
	r.Settings = Settings{LargeBytes: o.LargeBytes, SmallBytes: o.SmallBytes, FewTensors: o.FewTensors,
		ManyTensors: o.ManyTensors, Repeats: o.Repeats, AttachIters: o.AttachIters, Clients: o.Clients,
		ConcurrencySeconds: o.ConcurrencyDuration.Seconds(), Scenarios: o.Scenarios,
		CheckpointOnTmpfs: onTmpfs(o.TmpDir), SharedMemoryDirRoot: o.ShmDir}
	// Snapshot the binaries: a `make build` elsewhere during the run must
	// not swap them under the scenarios.
	snap, err := snapshotBinaries(o.BinDir)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(snap)
	o.BinDir = snap
	if err := os.MkdirAll(o.TmpDir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint folder: %w", err)
	}
	e := &Env{Options: o, models: map[ModelSpec]*Model{}}
	if e.dir, err = os.MkdirTemp(o.TmpDir, "wcache-bench-models-"); err != nil {
		return nil, fmt.Errorf("checkpoint folder: %w", err)
	}
	defer func() {
		if o.Keep {
			o.logf("keeping the checkpoints in %s", e.dir)
		} else {
			os.RemoveAll(e.dir)
		}
	}()
	for _, s := range Scenarios() {
		if !slices.Contains(o.Scenarios, s.Name) {
			continue
		}
		o.logf("scenario %s", s.Name)
		res, targets, err := s.Run(ctx, e)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		for i := range targets {
			targets[i].Scenario = s.Name
		}
		r.Results[s.Name], r.Targets = res, append(r.Targets, targets...)
	}
	r.Models = e.generated
	r.Seconds = round3(time.Since(began).Seconds())
	return r, nil
}

// snapshotBinaries copies the binaries of dir into a new private temporary
// folder and returns it. The CUDA plugin is optional (the pipeline scenario
// says it did not measure without it); another binary missing is an error
// naming the fix.
func snapshotBinaries(dir string) (string, error) {
	snap, err := os.MkdirTemp("", "wcache-bench-bin-")
	if err != nil {
		return "", fmt.Errorf("snapshot binaries: %w", err)
	}
	for _, b := range []string{"wcache", "wcache-backend-mock", cudaPlugin} {
		data, err := os.ReadFile(filepath.Join(dir, b))
		if b == cudaPlugin && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(snap, b), data, 0o700)
		}
		if err != nil {
			os.RemoveAll(snap)
			return "", fmt.Errorf("snapshot %s: %w (run `make build` first, or pass -bin)", filepath.Join(dir, b), err)
		}
	}
	return snap, nil
}
