package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/wcache/wcache/test/benchreport"
	"github.com/wcache/wcache/test/testproc"
)

// A Scenario is one measurement: Run returns its figures (stored under Name
// in the report's results) and the targets it checks, or an error: figures
// are never made up. Adding one is a file with its Run, a line in
// Scenarios and a section in the docs template.
type Scenario struct {
	Name string
	Run  func(ctx context.Context, e *Env) (any, []Target, error)
}

// Scenarios lists every scenario, in run order.
func Scenarios() []Scenario {
	return []Scenario{
		{"restart", runRestart},
		{"engine", runEngine},
		{"fill", runFill},
		{"publish", runPublish},
		{"pipeline", runPipeline},
		{"peercopy", runPeerCopy},
		{"attach", runAttach},
		{"concurrency", runConcurrency},
		{"startup", runStartup},
		{"takeover", runTakeover},
		{"content", runContent},
		{"micro", runMicro},
		{"generations", runGenerations},
		{"peer", runPeer},
		{"peerfill", runPeerFill},
		{"hostread", runHostRead},
		{"baseline", runBaseline},
	}
}

func scenarioNames() (out []string) {
	for _, s := range Scenarios() {
		out = append(out, s.Name)
	}
	return out
}

// Env is what scenarios share: the options (BinDir pointing at a snapshot
// of the binaries) and the generated checkpoints.
type Env struct {
	Options
	dir       string
	models    map[ModelSpec]*Model
	generated []benchreport.GeneratedModel // for the report
}

// Generated llama-like checkpoints of a size and a tensor count.
type (
	ModelSpec = testproc.ModelSpec
	Model     = testproc.Model
)

// The four checkpoints most scenarios ask for.
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
	m, took, err := testproc.GenerateModel(e.dir, spec)
	if err != nil {
		return nil, err
	}
	e.models[spec] = m
	e.generated = append(e.generated, benchreport.GeneratedModel{Model: *m, Name: spec.Name(), GenerateSeconds: benchreport.Round3(took.Seconds())})
	return m, nil
}

// warmModel is Model with the checkpoint read once, untimed, so that its
// files are in the page cache.
func (e *Env) warmModel(spec ModelSpec) (*Model, error) {
	m, err := e.Model(spec)
	if err == nil {
		_, err = sequentialRead(m.Files)
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
// nothing. The first scenario that fails stops the run; a missed target is
// a Target with Met false, not an error.
func Run(ctx context.Context, o Options) (*Report, error) {
	began := time.Now()
	r := &Report{Schema: benchreport.Schema, Generated: began.UTC().Truncate(time.Second), Machine: benchreport.ReadMachine(),
		Results: map[string]any{}}
	var err error
	if r.Commit, err = benchreport.ReadCommit(ctx, o.RepoDir); err != nil {
		return nil, err
	}
	r.Settings = benchreport.Settings{LargeBytes: o.LargeBytes, SmallBytes: o.SmallBytes, FewTensors: o.FewTensors,
		ManyTensors: o.ManyTensors, Repeats: o.Repeats, AttachIters: o.AttachIters, Clients: o.Clients,
		ConcurrencySeconds: o.ConcurrencyDuration.Seconds(), Scenarios: o.Scenarios,
		CheckpointOnTmpfs: onTmpfs(o.TmpDir), SharedMemoryDirRoot: o.ShmDir}
	// Snapshot the binaries: a `make build` elsewhere during the run must
	// not swap them under the scenarios.
	for _, dir := range []*string{&o.BinDir, &o.BaselineDir} {
		if *dir == "" {
			continue
		}
		snap, err := snapshotBinaries(*dir)
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(snap)
		*dir = snap
	}
	e := &Env{Options: o, models: map[ModelSpec]*Model{}}
	if err = os.MkdirAll(o.TmpDir, 0o755); err == nil {
		e.dir, err = os.MkdirTemp(o.TmpDir, "wcache-bench-models-")
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint folder: %w", err)
	}
	defer os.RemoveAll(e.dir)
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
	r.Seconds = benchreport.Round3(time.Since(began).Seconds())
	return r, nil
}

// snapshotBinaries copies the binaries of dir into a new temporary folder
// and returns it. The CUDA plugin is optional (pipeline says it did not
// measure without it); another binary missing is an error.
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

// rounds runs round n times and logs what each returns ("name i/n: …");
// an error names the round and ends the loop.
func (e *Env) rounds(name string, n int, round func(i int) (string, error)) error {
	for i := range n {
		msg, err := round(i)
		if err != nil {
			return fmt.Errorf("%s, round %d: %w", name, i+1, err)
		}
		e.logf("%s %d/%d: %s", name, i+1, n, msg)
	}
	return nil
}

// alternate times ways of doing the same work on bytes bytes, Repeats
// rounds, each round running every way once in an order that rotates; the
// rates (GiB/s) go to s under the ways' names.
func (e *Env) alternate(name string, bytes uint64, s series, ways map[string]func() error) error {
	keys := slices.Sorted(maps.Keys(ways))
	return e.rounds(name, e.Repeats, func(i int) (string, error) {
		var msg []string
		for k := range keys {
			key := keys[(i+k)%len(keys)]
			start := time.Now()
			if err := ways[key](); err != nil {
				return "", fmt.Errorf("%s: %w", key, err)
			}
			s.Add(key, benchreport.GiBps(bytes, time.Since(start)))
		}
		for _, key := range keys {
			msg = append(msg, fmt.Sprintf("%s %.2f GiB/s", key, s.Last(key)))
		}
		return strings.Join(msg, ", "), nil
	})
}

// interleave runs warmup untimed iterations, then iters timed ones; each
// iteration runs every step once, starting one step further each time so
// that no step always runs first (figures compared in a ratio share the
// machine's noise). keep tells a step whether the iteration is timed.
func interleave(warmup, iters int, steps ...func(keep bool) error) error {
	for i := range warmup + iters {
		for k := range steps {
			if err := steps[(i+k)%len(steps)](i >= warmup); err != nil {
				return err
			}
		}
	}
	return nil
}

// freshRounds runs every argv in a fresh process (world.fresh) Repeats+1
// times, each round all of them in turn; the first round (page cache and
// binaries warm-up) is untimed, the others go to the laps of their argv
// ("work", "wall" and the steps). check, when set, vets argvs[i]'s result.
func (e *Env) freshRounds(name string, w *world, d *daemonProc, check func(i int, r HelperResult) error, argvs ...[]string) ([]laps, error) {
	runs := make([]laps, len(argvs))
	for i := range runs {
		runs[i] = laps{}
	}
	return runs, e.rounds(name, e.Repeats+1, func(round int) (string, error) {
		var msg []string
		for i, argv := range argvs {
			r, err := w.fresh(argv...)
			if err == nil && check != nil {
				err = check(i, r)
			}
			if err != nil {
				return "", d.withOutput(err)
			}
			if round > 0 {
				runs[i]["work"], runs[i]["wall"] = append(runs[i]["work"], time.Duration(r.WorkNS)), append(runs[i]["wall"], r.Wall)
				for k, ns := range r.Steps {
					runs[i][k] = append(runs[i][k], time.Duration(ns))
				}
			}
			msg = append(msg, fmt.Sprintf("%.1f ms", benchreport.MS(time.Duration(r.WorkNS))))
		}
		return strings.Join(msg, ", "), nil
	})
}

// wholeModel is a freshRounds check that a helper got every tensor and
// byte of m; it adds the versions the helper reports to versions.
func wholeModel(m *Model, versions map[string]string) func(int, HelperResult) error {
	return func(i int, r HelperResult) error {
		maps.Copy(versions, r.Versions)
		if r.Tensors != m.Tensors || r.Bytes != m.Bytes {
			return fmt.Errorf("helper %d of the round got %d tensors of %d bytes, the checkpoint has %d of %d", i+1, r.Tensors, r.Bytes, m.Tensors, m.Bytes)
		}
		return nil
	}
}
