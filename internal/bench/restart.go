package bench

import (
	"context"
	"fmt"
	"os/exec"
	"time"
)

// RestartVariant is one way a fresh process gets every tensor usable.
type RestartVariant struct {
	Name string `json:"name"`
	// Path is "read" (safetensors from the page cache) or "attach"
	// (wcache daemon).
	Path string `json:"path"`
	Lang string `json:"lang"`
	// Work is measured inside the process from the start of the work to
	// "all tensors usable"; Wall is the whole process, fork/exec to exit.
	Work    Summary `json:"work"`
	Wall    Summary `json:"wall"`
	Tensors int     `json:"tensors"`
	Bytes   uint64  `json:"bytes"`
	// StepsMS are the medians of the in-process steps (see HelperResult).
	StepsMS map[string]float64 `json:"steps_ms"`
}

// RestartResult is the restart scenario's figures.
type RestartResult struct {
	Model    Model            `json:"model"`
	Repeats  int              `json:"repeats"`
	Variants []RestartVariant `json:"variants"`
	// Ratios read/attach of the medians, per language, inside the process
	// and for the whole process.
	GoWorkRatio     float64 `json:"go_work_ratio"`
	GoWallRatio     float64 `json:"go_wall_ratio"`
	PythonWorkRatio float64 `json:"python_work_ratio"`
	PythonWallRatio float64 `json:"python_wall_ratio"`
	// GoTouch is the time a Go process then needs to fault in one byte of
	// every page of the shared mapping (informational: a loader's read has
	// paid this already, an attach pays it on first use).
	GoTouch  Summary           `json:"go_touch"`
	Versions map[string]string `json:"versions"`
}

// restart variant names.
const (
	variantGoRead    = "Go: parse headers + read every tensor"
	variantGoAttach  = "Go: core/client attach + mmap handles"
	variantPyRead    = "Python: numpy read of every tensor"
	variantPyAttach  = "Python: wcache.attach + zero-copy torch tensors"
	restartRatioGoal = 100
)

// runRestart measures the large checkpoint: the daemon serves it while
// fresh processes read the files or attach, interleaved so that they share
// the machine's noise. One untimed round warms the page cache and the
// binaries.
func runRestart(ctx context.Context, e *Env) (any, []Target, error) {
	o := e.Options
	model, err := e.Model(e.largeFew())
	if err != nil {
		return nil, nil, err
	}
	w, err := newWorld(o, "restart", model.Bytes+model.Bytes/8+(64<<20))
	if err != nil {
		return nil, nil, err
	}
	defer w.Close()
	d, err := w.startServe(ctx, model.Dir, nil)
	if err != nil {
		return nil, nil, err
	}
	defer d.Stop()
	cfg, err := w.engineConfig(ctx, model.Dir)
	if err != nil {
		return nil, nil, d.withOutput(err)
	}
	capability := cfg.DeviceCapability

	type variant struct {
		name, path, lang string
		cmd              func() (*exec.Cmd, error)
		runs             []freshResult
	}
	variants := []*variant{
		{name: variantGoRead, path: "read", lang: "go", cmd: func() (*exec.Cmd, error) {
			return w.helperCmd(ctx, helperReadFiles, "-model", model.Dir), nil
		}},
		{name: variantGoAttach, path: "attach", lang: "go", cmd: func() (*exec.Cmd, error) {
			return w.helperCmd(ctx, helperAttach, "-model", model.Dir, "-device-uuid", w.UUID,
				"-device-capability", capability), nil
		}},
		{name: variantPyRead, path: "read", lang: "python", cmd: func() (*exec.Cmd, error) {
			return w.pythonCmd(ctx, "read_numpy.py", pyReadNumpy, model.Dir)
		}},
		{name: variantPyAttach, path: "attach", lang: "python", cmd: func() (*exec.Cmd, error) {
			return w.pythonCmd(ctx, "attach_torch.py", pyAttachTorch, model.Dir, w.UUID, capability)
		}},
	}
	res := &RestartResult{Model: *model, Repeats: o.Repeats, Versions: map[string]string{}}
	for round := 0; round <= o.Repeats; round++ {
		for _, v := range variants {
			cmd, err := v.cmd()
			if err != nil {
				return nil, nil, err
			}
			r, err := runFresh(cmd)
			if err != nil {
				return nil, nil, d.withOutput(fmt.Errorf("restart %s: %w", v.name, err))
			}
			if r.Tensors != model.Tensors || r.Bytes != model.Bytes {
				return nil, nil, fmt.Errorf("restart %s: got %d tensors of %d bytes, the checkpoint has %d of %d",
					v.name, r.Tensors, r.Bytes, model.Tensors, model.Bytes)
			}
			for k, val := range r.Versions {
				res.Versions[k] = val
			}
			if round > 0 { // round 0 warms up
				v.runs = append(v.runs, r)
			}
		}
		o.logf("restart: round %d/%d done", round, o.Repeats)
	}
	// First touch of the mapping, measured apart so that it does not bend
	// the attach figures.
	var touches []time.Duration
	for range o.Repeats {
		r, err := runFresh(w.helperCmd(ctx, helperAttach, "-model", model.Dir, "-device-uuid", w.UUID,
			"-device-capability", capability, "-touch"))
		if err != nil {
			return nil, nil, d.withOutput(fmt.Errorf("restart touch: %w", err))
		}
		touches = append(touches, time.Duration(r.TouchNS))
	}
	res.GoTouch = Summarize(touches)

	med := map[string][2]float64{}
	for _, v := range variants {
		var work, wall []time.Duration
		steps := map[string][]time.Duration{}
		for _, r := range v.runs {
			work = append(work, time.Duration(r.WorkNS))
			wall = append(wall, r.Wall)
			for k, ns := range r.Steps {
				steps[k] = append(steps[k], time.Duration(ns))
			}
		}
		rv := RestartVariant{Name: v.name, Path: v.path, Lang: v.lang, Work: Summarize(work), Wall: Summarize(wall),
			Tensors: model.Tensors, Bytes: model.Bytes, StepsMS: map[string]float64{}}
		for k, ds := range steps {
			rv.StepsMS[k] = round3(Summarize(ds).MedianMS)
		}
		res.Variants = append(res.Variants, rv)
		med[v.name] = [2]float64{rv.Work.MedianMS, rv.Wall.MedianMS}
	}
	res.GoWorkRatio = round3(ratio(med[variantGoRead][0], med[variantGoAttach][0]))
	res.GoWallRatio = round3(ratio(med[variantGoRead][1], med[variantGoAttach][1]))
	res.PythonWorkRatio = round3(ratio(med[variantPyRead][0], med[variantPyAttach][0]))
	res.PythonWallRatio = round3(ratio(med[variantPyRead][1], med[variantPyAttach][1]))
	checks := []Target{
		atLeast("Go read/attach, in-process", res.GoWorkRatio, restartRatioGoal, "×"),
		atLeast("Python read/attach, in-process", res.PythonWorkRatio, restartRatioGoal, "×"),
		reported("Go read/attach, whole process", res.GoWallRatio, "×"),
		reported("Python read/attach, whole process", res.PythonWallRatio, "×"),
	}
	if err := d.Stop(); err != nil {
		return nil, nil, err
	}
	return res, checks, nil
}
