package bench

import (
	"context"

	"github.com/wcache/wcache/test/benchreport"
)

// RestartVariant is one way a fresh process gets every tensor usable, Path
// "read" or "attach", in Lang: Work inside the process, Wall the whole.
type RestartVariant struct {
	Name    string             `json:"name"`
	Path    string             `json:"path"`
	Lang    string             `json:"lang"`
	Work    Summary            `json:"work"`
	Wall    Summary            `json:"wall"`
	Tensors int                `json:"tensors"`
	Bytes   uint64             `json:"bytes"`
	StepsMS map[string]float64 `json:"steps_ms"`
}

// RestartResult is the restart scenario's figures. The ratios are read ÷
// attach of the medians, per language, in-process (work) and whole
// process (wall). GoTouch is the first touch of every page of the Go
// mapping, measured apart (a loader's read has paid it already, an attach
// pays it on first use).
type RestartResult struct {
	Model           Model             `json:"model"`
	Variants        []RestartVariant  `json:"variants"`
	GoWorkRatio     float64           `json:"go_work_ratio"`
	GoWallRatio     float64           `json:"go_wall_ratio"`
	PythonWorkRatio float64           `json:"python_work_ratio"`
	PythonWallRatio float64           `json:"python_wall_ratio"`
	GoTouch         Summary           `json:"go_touch"`
	Versions        map[string]string `json:"versions"`
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
	res.GoTouch = runs[len(variants)].Summary("touch")
	for i, v := range variants {
		rv := v.RestartVariant
		rv.Work, rv.Wall, rv.Tensors, rv.Bytes, rv.StepsMS = runs[i].Summary("work"), runs[i].Summary("wall"), m.Tensors, m.Bytes, runs[i].MediansMS("work", "wall")
		res.Variants = append(res.Variants, rv)
	}
	ratios := func(read, attach RestartVariant) (work, wall float64) {
		return benchreport.Round3(benchreport.Ratio(read.Work.MedianMS, attach.Work.MedianMS)),
			benchreport.Round3(benchreport.Ratio(read.Wall.MedianMS, attach.Wall.MedianMS))
	}
	v := res.Variants
	res.GoWorkRatio, res.GoWallRatio = ratios(v[0], v[1])
	res.PythonWorkRatio, res.PythonWallRatio = ratios(v[2], v[3])
	return res, []Target{
		benchreport.AtLeast("Go read/attach, in-process", res.GoWorkRatio, restartRatioGoal, "×"),
		benchreport.AtLeast("Python read/attach, in-process", res.PythonWorkRatio, restartRatioGoal, "×"),
		benchreport.Reported("Go read/attach, whole process", res.GoWallRatio, "×"),
		benchreport.Reported("Python read/attach, whole process", res.PythonWallRatio, "×"),
	}, d.Stop()
}
