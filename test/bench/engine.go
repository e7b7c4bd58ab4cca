package bench

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Engine-restart figures of issue 23: the Python client on a checkpoint of
// engineTensors tensors (DeepSeek-class MoE checkpoints have ~90k), and
// what each engine integration adds on top of it.
const (
	engineTensors = 100_000
	// engineBytes keeps that checkpoint small (H = 16): the figure is about
	// per-tensor cost, not bytes.
	engineBytes = 64 << 20
	// pythonAttachGoalMS is the goal for attach + every tensor ready.
	pythonAttachGoalMS = 500
)

// EngineOverhead is one engine integration's entry: Status is "skipped"
// (with Reason) when its environment is absent, "not measured" (with
// Reason) when the environment is there but nothing measures it yet.
type EngineOverhead struct {
	Engine string `json:"engine"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	Env    string `json:"env,omitempty"`
}

// EngineResult is the engine scenario's figures. PythonAttach is
// wcache.attach + tensors() in a fresh process (attach_torch.py's
// "attach" and "map" steps), PythonDigest its checkpoint_digest of the
// headers, measured apart (an engine integration computes it too).
type EngineResult struct {
	Model        Model             `json:"model"`
	Repeats      int               `json:"repeats"`
	PythonAttach Summary           `json:"python_attach"`
	PythonDigest Summary           `json:"python_digest"`
	Engines      []EngineOverhead  `json:"engines"`
	Versions     map[string]string `json:"versions"`
}

// runEngine serves the many-tensor checkpoint and runs attach_torch.py in
// fresh processes (one untimed round first), then lists the engine
// integrations' environments.
func runEngine(ctx context.Context, e *Env) (any, []Target, error) {
	m, err := e.Model(ModelSpec{Bytes: engineBytes, Tensors: engineTensors})
	if err != nil {
		return nil, nil, err
	}
	w, d, cfg, err := serving(ctx, e.Options, "engine", m)
	if err != nil {
		return nil, nil, err
	}
	defer w.Close()
	attachPy, err := w.script("attach_torch.py", pyAttachTorch)
	if err != nil {
		return nil, nil, err
	}
	argv := []string{e.Python, attachPy, m.Dir, w.UUID, cfg.DeviceCapability}
	res := &EngineResult{Model: *m, Repeats: e.Repeats, Versions: map[string]string{}}
	var attach, digest []time.Duration
	for round := 0; round <= e.Repeats; round++ {
		r, err := w.fresh(ctx, argv...)
		if err != nil {
			return nil, nil, d.withOutput(fmt.Errorf("engine: python attach: %w", err))
		}
		if r.Tensors != m.Tensors || r.Bytes != m.Bytes {
			return nil, nil, fmt.Errorf("engine: python attach got %d tensors of %d bytes, the checkpoint has %d of %d",
				r.Tensors, r.Bytes, m.Tensors, m.Bytes)
		}
		for k, v := range r.Versions {
			res.Versions[k] = v
		}
		if round > 0 { // round 0 warms up
			attach = append(attach, time.Duration(r.Steps["attach"]+r.Steps["map"]))
			digest = append(digest, time.Duration(r.Steps["digest"]))
		}
	}
	res.PythonAttach, res.PythonDigest = Summarize(attach), Summarize(digest)
	for _, engine := range []string{"transformers", "vllm", "sglang"} {
		res.Engines = append(res.Engines, engineEnv(ctx, e.RepoDir, engine))
	}
	return res, []Target{
		atMost(fmt.Sprintf("Python attach + tensors(), %d tensors", m.Tensors), res.PythonAttach.MedianMS, pythonAttachGoalMS, "ms"),
		reported(fmt.Sprintf("Python checkpoint_digest, %d tensors", m.Tensors), res.PythonDigest.MedianMS, "ms"),
	}, d.Stop()
}

// engineEnv reports whether the pinned environment of engine is built
// (clients/python/engines/setup-venv.sh --check). Its overhead on top of
// attach (config, model skeleton, parameter assignment) is not measured
// yet: the entry says so instead of a figure.
func engineEnv(ctx context.Context, repo, engine string) EngineOverhead {
	out, err := exec.CommandContext(ctx, filepath.Join(repo, "clients/python/engines/setup-venv.sh"), "--check", engine).Output()
	if err != nil {
		return EngineOverhead{Engine: engine, Status: "skipped",
			Reason: "no cached environment (make engine-test ENGINES=" + engine + " builds it)"}
	}
	return EngineOverhead{Engine: engine, Status: "not measured", Env: strings.TrimSpace(string(out)),
		Reason: "the integration's overhead on top of attach is not measured yet (issue 23)"}
}
