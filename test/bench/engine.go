package bench

import (
	"context"
	_ "embed"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/wcache/wcache/test/benchreport"
)

// Engine-restart figures of issue 23: the Python client on a checkpoint of
// engineTensors tensors (DeepSeek-class MoE checkpoints have ~90k), and
// what each engine integration adds on top of it.
const (
	engineTensors = 100_000
	// engineBytes keeps that checkpoint small (H = 16): the figure is about
	// per-tensor cost, not bytes.
	engineBytes = 64 << 20
	// pythonAttachGoalMS is the goal for attach + every tensor ready
	// (issue 37).
	pythonAttachGoalMS = 300
)

// pyEngineOverhead measures an engine integration (py/engine_overhead.py).
//
//go:embed py/engine_overhead.py
var pyEngineOverhead string

// EngineOverhead is one engine integration's entry. Status is "measured"
// (times work: the integration's load against a daemon holding the model,
// in a fresh process; attach: wcache.attach + tensors() of the same config
// in that process right after; overhead: the difference, per run; and
// engine_overhead.py's other steps), "skipped" (Reason: its environment is
// absent) or "not measured" (Reason).
type EngineOverhead struct {
	Engine  string `json:"engine"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Env     string `json:"env,omitempty"`
	Tensors int    `json:"tensors,omitempty"`
	benchreport.Figures
}

// EngineResult is the engine scenario's figures: times python_attach,
// wcache.attach + tensors() in a fresh process (attach_torch.py's "attach"
// and "map" steps), python_config, its config step as the README does it
// (served_checkpoint_digest), and python_digest, the checkpoint_digest of
// the headers that replaces, measured apart.
type EngineResult struct {
	Model    Model             `json:"model"`
	Engines  []EngineOverhead  `json:"engines"`
	Versions map[string]string `json:"versions"`
	benchreport.Figures
}

// runEngine serves the many-tensor checkpoint and runs attach_torch.py in
// fresh processes (one untimed round first), then lists the engine
// integrations' environments.
func runEngine(ctx context.Context, e *Env) (any, []Target, error) {
	s, err := e.serve(ctx, "engine", ModelSpec{Bytes: engineBytes, Tensors: engineTensors})
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	m, d := s.m, s.d
	argv := s.pythonArgv(pyAttachTorch, "--header-digest", m.Dir, s.UUID, s.cfg.DeviceCapability)
	res := &EngineResult{Model: *m, Versions: map[string]string{}}
	runs, err := e.freshRounds("engine: python attach", s.world, d, wholeModel(m, res.Versions), argv)
	if err != nil {
		return nil, nil, err
	}
	l := runs[0]
	py := laps{"python_config": l["config"], "python_digest": l["digest"]}
	for i, attach := range l["attach"] {
		py["python_attach"] = append(py["python_attach"], attach+l["map"][i])
	}
	res.Figures = benchreport.FiguresOf(py, nil)
	if err := d.Stop(); err != nil {
		return nil, nil, err
	}
	for _, engine := range []string{"transformers", "vllm", "sglang"} {
		o, err := engineOverhead(ctx, e, engine)
		if err != nil {
			return nil, nil, err
		}
		res.Engines = append(res.Engines, o)
	}
	return res, []Target{
		benchreport.AtMost(fmt.Sprintf("Python attach + tensors(), %d tensors", m.Tensors), res.Times["python_attach"].MedianMS, pythonAttachGoalMS, "ms"),
		benchreport.Reported(fmt.Sprintf("Python config step, served_checkpoint_digest (README), %d tensors", m.Tensors), res.Times["python_config"].MedianMS, "ms"),
		benchreport.Reported(fmt.Sprintf("Python checkpoint_digest, %d tensors", m.Tensors), res.Times["python_digest"].MedianMS, "ms"),
	}, nil
}

// engineOverhead measures an engine integration in its pinned
// environment (clients/python/engines/setup-venv.sh --check) against a
// daemon of its own: engine_overhead.py writes a tiny model, publishes it
// into the empty daemon, then times attaches in fresh processes (one
// untimed round first). An absent environment is "skipped"; vLLM and
// SGLang are "not measured": their loaders need a GPU past registration.
func engineOverhead(ctx context.Context, e *Env, engine string) (EngineOverhead, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(e.RepoDir, "clients/python/engines/setup-venv.sh"), "--check", engine).Output()
	if err != nil {
		return EngineOverhead{Engine: engine, Status: "skipped",
			Reason: "no cached environment (make engine-test ENGINES=" + engine + " builds it)"}, nil
	}
	o := EngineOverhead{Engine: engine, Env: strings.TrimSpace(string(out))}
	if engine != "transformers" {
		o.Status, o.Reason = "not measured", "its loader builds the model on a GPU (the engine tests run registration and the CPU cases only)"
		return o, nil
	}
	w, err := newWorld(e.Options, "engine-"+engine, &Model{Bytes: 64 << 20})
	if err != nil {
		return o, err
	}
	defer w.Close()
	w.Setenv("WCACHE_BACKEND=mock")
	d, err := w.startServe(ctx, 0, nil)
	if err != nil {
		return o, err
	}
	python, dir := filepath.Join(o.Env, "bin", "python"), filepath.Join(w.Root, "model")
	script := func(role string) []string { return []string{python, "-c", pyEngineOverhead, engine, role, dir} }
	for _, role := range []string{"make", "publish"} {
		if _, err := w.fresh(script(role)...); err != nil {
			return o, d.withOutput(fmt.Errorf("engine %s %s: %w", engine, role, err))
		}
	}
	runs, err := e.freshRounds("engine "+engine, w, d, func(_ int, r HelperResult) error {
		o.Tensors = r.Tensors
		return nil
	}, script("attach"))
	if err != nil {
		return o, err
	}
	o.Status, o.Figures = "measured", benchreport.FiguresOf(runs[0], nil)
	return o, d.Stop()
}
