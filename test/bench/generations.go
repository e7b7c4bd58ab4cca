package bench

import (
	"context"
	"fmt"

	"github.com/wcache/wcache/test/benchreport"
)

// GenerationsResult is the generations scenario's figures (issue 25):
// Attach (open connection, until the manifest) of one model on a daemon
// that serves it alone (One) and on one that holds three other
// generations, loaded first so that an attach compares their configs
// before it finds its own (Four: the worst case): times one and four,
// ratio four (p50 ÷ one's). DeviceBytes is what the four-generation daemon
// reports holding, ArenaBytes its generations' device bytes summed (equal).
type GenerationsResult struct {
	Model       Model   `json:"model"`
	Others      []Model `json:"others"`
	DeviceBytes uint64  `json:"device_bytes"`
	ArenaBytes  uint64  `json:"arena_bytes"`
	benchreport.Figures
}

// generationsGoal bounds attach p50 with 4 generations ÷ with 1.
const generationsGoal = 1.2

// runGenerations serves the small checkpoint alone and beside three other
// checkpoints (a tensor more each, so each is a generation of its own) and
// times attaches on both daemons, interleaved as the attach scenario's.
func runGenerations(ctx context.Context, e *Env) (any, []Target, error) {
	m, err := e.Model(e.smallFew())
	if err != nil {
		return nil, nil, err
	}
	res := &GenerationsResult{Model: *m}
	var others []*Model
	for k := 1; k <= 3; k++ {
		o, err := e.Model(ModelSpec{Bytes: e.SmallBytes, Tensors: e.FewTensors + k})
		if err != nil {
			return nil, nil, err
		}
		res.Others, others = append(res.Others, *o), append(others, o)
	}
	ts, stop, err := serveTargets(ctx, e.Options, "generations", []*Model{m, m}, nil, others)
	if err != nil {
		return nil, nil, err
	}
	defer stop()
	one, four := ts[0], ts[1]
	st, err := four.c.Status(ctx)
	if err == nil && len(st.Generations) != 4 {
		err = fmt.Errorf("the daemon holds %d generations, want 4", len(st.Generations))
	}
	if err != nil {
		return nil, nil, four.d.withOutput(err)
	}
	for _, g := range st.Generations {
		res.ArenaBytes += g.DeviceBytes
	}
	res.DeviceBytes = st.DeviceBytesTotal
	if err := interleave(attachWarmup, e.AttachIters, one.step(ctx), four.step(ctx)); err != nil {
		return nil, nil, err
	}
	res.Figures = benchreport.FiguresOf(laps{"one": one.laps["attach"], "four": four.laps["attach"]}, nil)
	ratio := res.Ratio("four", "four", "one")
	e.logf("generations: attach p50 %.3f ms with 1 generation, %.3f ms with 4: %.2f×", res.Times["one"].MedianMS, res.Times["four"].MedianMS, ratio)
	return res, []Target{benchreport.AtMost("attach p50 with 4 generations ÷ with 1", ratio, generationsGoal, "×")}, nil
}
