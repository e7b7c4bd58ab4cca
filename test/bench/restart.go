package bench

import (
	"context"

	"github.com/wcache/wcache/test/benchreport"
)

// RestartVariant is one way a fresh process gets every tensor usable, Path
// "read" or "attach", in Lang: times work (inside the process), wall (the
// whole process) and the helper's steps of the work.
type RestartVariant struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Lang string `json:"lang"`
	benchreport.Figures
}

// RestartResult is the restart scenario's figures: ratios go_work, go_wall,
// python_work and python_wall, read ÷ attach of the medians per language,
// in-process (work) and whole process (wall); times go_touch, the first
// touch of every page of the Go mapping, measured apart (a loader's read
// has paid it already, an attach pays it on first use).
type RestartResult struct {
	Model    Model             `json:"model"`
	Variants []RestartVariant  `json:"variants"`
	Versions map[string]string `json:"versions"`
	benchreport.Figures
}

const restartRatioGoal = 100

// runRestart measures the large checkpoint: the daemon serves it while
// fresh processes read the files or attach, interleaved so that they share
// the machine's noise. One untimed round warms the page cache and the
// binaries.
func runRestart(ctx context.Context, e *Env) (any, []Target, error) {
	s, err := e.serve(ctx, "restart", e.largeFew())
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	w, d, m := s.world, s.d, s.m
	goAttach := w.helperArgv(helperAttach, m.Dir, w.UUID, s.cfg.DeviceCapability)
	variants := []struct {
		RestartVariant
		argv []string
	}{
		{RestartVariant{Name: "Go: parse headers + read every tensor", Path: "read", Lang: "go"}, w.helperArgv(helperReadFiles, m.Dir)},
		{RestartVariant{Name: "Go: core/client attach + mmap handles", Path: "attach", Lang: "go"}, goAttach},
		{RestartVariant{Name: "Python: numpy read of every tensor", Path: "read", Lang: "python"}, w.pythonArgv(pyReadNumpy, m.Dir)},
		{RestartVariant{Name: "Python: wcache.attach + zero-copy torch tensors", Path: "attach", Lang: "python"},
			w.pythonArgv(pyAttachTorch, m.Dir, w.UUID, s.cfg.DeviceCapability)},
	}
	res := &RestartResult{Model: *m, Versions: map[string]string{}}
	var argvs [][]string
	for _, v := range variants {
		argvs = append(argvs, v.argv)
	}
	// Last, the first touch of the Go mapping: a process of its own, so that
	// it does not bend the attach figures.
	runs, err := e.freshRounds("restart", w, d, wholeModel(m, res.Versions), append(argvs, append(goAttach, "touch"))...)
	if err != nil {
		return nil, nil, err
	}
	res.Figures = benchreport.FiguresOf(laps{"go_touch": runs[len(variants)]["touch"]}, nil)
	for i, v := range variants {
		v.Figures = benchreport.FiguresOf(runs[i], nil)
		res.Variants = append(res.Variants, v.RestartVariant)
	}
	// name: the read variant's median over the attach variant's, of key.
	ratio := func(name string, read int, key string) float64 {
		v := res.Variants
		res.Ratios[name] = benchreport.Round3(benchreport.Ratio(v[read].Times[key].MedianMS, v[read+1].Times[key].MedianMS))
		return res.Ratios[name]
	}
	return res, []Target{
		benchreport.AtLeast("Go read/attach, in-process", ratio("go_work", 0, "work"), restartRatioGoal, "×"),
		benchreport.AtLeast("Python read/attach, in-process", ratio("python_work", 2, "work"), restartRatioGoal, "×"),
		benchreport.Reported("Go read/attach, whole process", ratio("go_wall", 0, "wall"), "×"),
		benchreport.Reported("Python read/attach, whole process", ratio("python_wall", 2, "wall"), "×"),
	}, d.Stop()
}
