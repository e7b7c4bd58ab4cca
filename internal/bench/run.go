package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// modelSet generates checkpoints on first use and removes them at Close.
type modelSet struct {
	o         Options
	dir       string
	models    map[ModelSpec]*Model
	generated []GeneratedModel
}

func newModelSet(o Options) (*modelSet, error) {
	if err := os.MkdirAll(o.TmpDir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint folder: %w", err)
	}
	dir, err := os.MkdirTemp(o.TmpDir, "wcache-bench-models-")
	if err != nil {
		return nil, fmt.Errorf("checkpoint folder: %w", err)
	}
	return &modelSet{o: o, dir: dir, models: map[ModelSpec]*Model{}}, nil
}

// get returns the checkpoint of spec, generating it the first time.
func (s *modelSet) get(spec ModelSpec) (*Model, error) {
	if m, ok := s.models[spec]; ok {
		return m, nil
	}
	s.o.logf("generating a %d MiB checkpoint of %d tensors in %s", spec.Bytes>>20, spec.Tensors, s.dir)
	m, took, err := GenerateModel(s.dir, spec)
	if err != nil {
		return nil, err
	}
	s.models[spec] = m
	s.generated = append(s.generated, GeneratedModel{Model: *m, Name: spec.Name(), GenerateSeconds: round3(took.Seconds())})
	return m, nil
}

// drop removes one checkpoint (to bound the disk and page cache in use).
func (s *modelSet) drop(spec ModelSpec) {
	if m, ok := s.models[spec]; ok {
		_ = os.RemoveAll(m.Dir)
		delete(s.models, spec)
	}
}

// Close removes every checkpoint unless Keep.
func (s *modelSet) Close() error {
	if s.o.Keep {
		s.o.logf("keeping the checkpoints in %s", s.dir)
		return nil
	}
	return os.RemoveAll(s.dir)
}

// Run runs the selected scenarios and returns the report; it does not
// write it. A scenario that fails stops the run with its error (figures
// are never made up); a target that is missed is a Finding, not an error.
func Run(ctx context.Context, o Options) (*Report, error) {
	began := time.Now()
	r := &Report{Schema: ReportSchema, Generated: began.UTC().Truncate(time.Second), Machine: ReadMachine(),
		GPU: GPUResult{Rows: gpuRows(), Note: gpuNote}}
	commit, err := ReadCommit(ctx, o.RepoDir, o.OutMarkdown, o.OutJSON)
	if err != nil {
		return nil, err
	}
	r.Commit = commit
	r.Settings = Settings{LargeBytes: o.LargeBytes, SmallBytes: o.SmallBytes, FewTensors: o.FewTensors,
		ManyTensors: o.ManyTensors, Repeats: o.Repeats, AttachIters: o.AttachIters, Clients: o.Clients,
		ConcurrencySeconds: o.ConcurrencyDuration.Seconds(), Scenarios: o.Scenarios,
		CheckpointOnTmpfs: onTmpfs(o.TmpDir), SharedMemoryDirRoot: o.ShmDir}
	if err := checkBinaries(o); err != nil {
		return nil, err
	}
	// Snapshot the binaries: a `make build` elsewhere during the run must
	// not swap them under the scenarios.
	snap, err := snapshotBinaries(o.BinDir)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(snap)
	o.BinDir = snap
	models, err := newModelSet(o)
	if err != nil {
		return nil, err
	}
	defer models.Close()
	var (
		largeFew  = ModelSpec{Bytes: o.LargeBytes, Tensors: o.FewTensors}
		largeMany = ModelSpec{Bytes: o.LargeBytes, Tensors: o.ManyTensors}
		smallFew  = ModelSpec{Bytes: o.SmallBytes, Tensors: o.FewTensors}
		smallMany = ModelSpec{Bytes: o.SmallBytes, Tensors: o.ManyTensors}
	)
	var largeRuns, smallRuns []serveRun
	var largeAlloc, smallAlloc Summary
	var largeModel, smallModel *Model

	if o.runs(ScenarioRestart) {
		o.logf("row 1: restart")
		m, err := models.get(largeFew)
		if err != nil {
			return nil, err
		}
		res, checks, err := runRestart(ctx, o, m)
		if err != nil {
			return nil, fmt.Errorf("restart: %w", err)
		}
		r.Restart, r.Checks = res, append(r.Checks, checks...)
		r.Machine.Python = pythonVersions(res.Versions)
	}
	if o.runs(ScenarioFill) {
		o.logf("row 3: fill")
		m, err := models.get(largeFew)
		if err != nil {
			return nil, err
		}
		res, runs, checks, err := runFill(ctx, o, m)
		if err != nil {
			return nil, fmt.Errorf("fill: %w", err)
		}
		r.Fill, r.Checks = res, append(r.Checks, checks...)
		largeRuns, largeModel, largeAlloc = runs, m, res.Warm.MockAllocate
	}
	if o.runs(ScenarioAttach) {
		o.logf("row 2: attach latency")
		var ms []*Model
		for _, spec := range []ModelSpec{smallFew, largeFew, smallMany, largeMany} {
			m, err := models.get(spec)
			if err != nil {
				return nil, err
			}
			ms = append(ms, m)
		}
		res, checks, err := runAttach(ctx, o, ms)
		if err != nil {
			return nil, fmt.Errorf("attach: %w", err)
		}
		r.Attach, r.Checks = res, append(r.Checks, checks...)
		models.drop(largeMany)
	}
	if o.runs(ScenarioConcurrency) {
		o.logf("row 4: concurrency")
		m, err := models.get(smallFew)
		if err != nil {
			return nil, err
		}
		res, checks, err := runConcurrency(ctx, o, m)
		if err != nil {
			return nil, fmt.Errorf("concurrency: %w", err)
		}
		r.Concurrency, r.Checks = res, append(r.Checks, checks...)
	}
	if o.runs(ScenarioStartup) {
		o.logf("row 6: start-up")
		m, err := models.get(smallFew)
		if err != nil {
			return nil, err
		}
		if smallRuns, smallAlloc, err = runStartupSeries(ctx, o, m); err != nil {
			return nil, fmt.Errorf("start-up: %w", err)
		}
		smallModel = m
	}

	if o.runs(ScenarioMicro) {
		o.logf("hot-path Go benchmarks")
		if r.Micro, err = runMicro(ctx, o); err != nil {
			return nil, fmt.Errorf("micro-benchmarks: %w", err)
		}
	}

	// Rows 5 and 6 from the serve runs of rows 3 and 6.
	if len(smallRuns) > 0 || len(largeRuns) > 0 {
		r.Startup, r.Footprint = &StartupResult{}, &FootprintResult{}
		for _, s := range []struct {
			m     *Model
			runs  []serveRun
			alloc Summary
		}{{smallModel, smallRuns, smallAlloc}, {largeModel, largeRuns, largeAlloc}} {
			if len(s.runs) == 0 {
				continue
			}
			r.Startup.Cases = append(r.Startup.Cases, startupCase(s.m, s.runs, s.alloc))
			r.Footprint.Cases = append(r.Footprint.Cases, footprintCase(s.m, s.runs))
		}
		if r.Concurrency != nil {
			r.Footprint.AfterLoad = r.Concurrency.Footprint
		}
		r.Checks = append(r.Checks, footprintChecks(r.Footprint)...)
		r.Checks = append(r.Checks, startupChecks(r.Startup)...)
	}
	r.Models = models.generated
	r.Findings = explain(ctx, o, r, models)
	r.Notes = notes(o, r)
	r.Seconds = round3(time.Since(began).Seconds())
	return r, nil
}

// benchBinaries are the binaries the scenarios run.
func benchBinaries() []string { return []string{"wcache", "wcache-backend-mock"} }

// snapshotBinaries copies the binaries of dir into a new private temporary
// folder and returns it.
func snapshotBinaries(dir string) (string, error) {
	snap, err := os.MkdirTemp("", "wcache-bench-bin-")
	if err != nil {
		return "", fmt.Errorf("snapshot binaries: %w", err)
	}
	for _, b := range benchBinaries() {
		data, err := os.ReadFile(filepath.Join(dir, b))
		if err == nil {
			err = os.WriteFile(filepath.Join(snap, b), data, 0o700)
		}
		if err != nil {
			os.RemoveAll(snap)
			return "", fmt.Errorf("snapshot binaries: %w", err)
		}
	}
	return snap, nil
}

// checkBinaries fails early, with the fix, when bin/ lacks a binary.
func checkBinaries(o Options) error {
	for _, b := range benchBinaries() {
		p := filepath.Join(o.BinDir, b)
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s is missing or not executable: run `make build` first (or pass -bin)", p)
		}
	}
	return nil
}

// pythonVersions formats the helper-reported versions.
func pythonVersions(v map[string]string) string {
	var parts []string
	for _, k := range []string{"python", "numpy", "torch"} {
		if v[k] != "" {
			parts = append(parts, k+" "+v[k])
		}
	}
	return strings.Join(parts, ", ")
}
