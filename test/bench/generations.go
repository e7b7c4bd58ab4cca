package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
)

// GenerationsResult is the generations scenario's figures (issue 25): the
// attach latency of one model served alone, and of the same model served
// by a daemon that holds three more generations (the model loaded last, so
// that the daemon compares every other generation's config before it finds
// the match: the worst case).
type GenerationsResult struct {
	Iterations int   `json:"iterations"`
	Model      Model `json:"model"`
	// Others are the checkpoints of the three other generations.
	Others []Model `json:"others"`
	// One and Four are Attach (open connection, until the manifest) on
	// the daemon holding one generation and on the one holding four.
	One  Summary `json:"one"`
	Four Summary `json:"four"`
	// Ratio is Four p50 / One p50.
	Ratio float64 `json:"ratio"`
	// DeviceBytes is what the four-generation daemon reports holding, and
	// ArenaBytes the sum of its generations' device bytes (equal: the
	// total is the sum).
	DeviceBytes uint64 `json:"device_bytes"`
	ArenaBytes  uint64 `json:"arena_bytes"`
}

// generationsGoal bounds attach p50 with 4 generations ÷ with 1.
const generationsGoal = 1.2

// runGenerations serves the small checkpoint alone in one daemon, and
// beside three more checkpoints in another, and times attaches to it on
// both, interleaved at every iteration (as the attach scenario's pairs) so
// that both figures are taken under the same conditions.
func runGenerations(ctx context.Context, e *Env) (any, []Target, error) {
	o := e.Options
	main, err := e.Model(e.smallFew())
	if err != nil {
		return nil, nil, err
	}
	res := &GenerationsResult{Iterations: o.AttachIters, Model: *main}
	args := []string{}
	for k := 1; k <= 3; k++ {
		// Distinct checkpoints (another size each), so that each is a
		// generation of its own.
		m, err := e.Model(ModelSpec{Bytes: e.SmallBytes >> k, Tensors: e.FewTensors})
		if err != nil {
			return nil, nil, err
		}
		res.Others = append(res.Others, *m)
		args = append(args, "--model", m.Dir)
	}
	args = append(args, "--model", main.Dir)

	one, err := newGenTarget(ctx, o, "generations-1", main, "--model", main.Dir)
	if err != nil {
		return nil, nil, err
	}
	defer one.close()
	four, err := newGenTarget(ctx, o, "generations-4", main, args...)
	if err != nil {
		return nil, nil, err
	}
	defer four.close()
	st, err := four.c.Status(ctx)
	if err != nil {
		return nil, nil, four.d.withOutput(err)
	}
	if len(st.Generations) != 4 {
		return nil, nil, four.d.withOutput(fmt.Errorf("the daemon holds %d generations, want 4", len(st.Generations)))
	}
	for _, g := range st.Generations {
		res.ArenaBytes += g.DeviceBytes
	}
	res.DeviceBytes = st.DeviceBytesTotal

	ts := []*genTarget{one, four}
	for i := range attachWarmup + o.AttachIters {
		for k := range ts {
			t := ts[(i+k)%len(ts)]
			if err := t.iterate(ctx, i >= attachWarmup); err != nil {
				return nil, nil, t.d.withOutput(err)
			}
		}
	}
	res.One, res.Four = Summarize(one.at), Summarize(four.at)
	res.Ratio = round3(ratio(res.Four.MedianMS, res.One.MedianMS))
	o.logf("generations: attach p50 %.3f ms with 1 generation, %.3f ms with 4: %.2f×", res.One.MedianMS, res.Four.MedianMS, res.Ratio)
	for _, t := range ts {
		if err := t.d.Stop(); err != nil {
			return nil, nil, err
		}
	}
	return res, []Target{atMost("attach p50 with 4 generations ÷ with 1", res.Ratio, generationsGoal, "×")}, nil
}

// genTarget is one daemon of the generations scenario with its open
// connection and the config of the model attached to.
type genTarget struct {
	w   *world
	d   *daemonProc
	c   *client.Client
	cfg cacheconfig.Config
	n   int
	at  []time.Duration
}

// newGenTarget starts `wcache serve` with args in a world of its own and
// connects to it; m is the model attached to.
func newGenTarget(ctx context.Context, o Options, name string, m *Model, args ...string) (*genTarget, error) {
	w, err := newWorld(o, name, m)
	if err != nil {
		return nil, err
	}
	t := &genTarget{w: w, n: m.Tensors}
	if t.d, err = w.startServe(ctx, nil, args...); err != nil {
		_ = w.Close()
		return nil, err
	}
	if t.cfg, err = w.engineConfig(ctx, m.Dir); err == nil {
		t.c, err = client.Dial(ctx, w.Target, client.Options{ClientName: "wcache-bench generations"})
	}
	if err == nil {
		_, err = t.c.Status(ctx)
	}
	if err != nil {
		t.close()
		return nil, t.d.withOutput(err)
	}
	return t, nil
}

// iterate times one Attach (until the manifest) and releases it; keep
// records it.
func (t *genTarget) iterate(ctx context.Context, keep bool) error {
	t0 := time.Now()
	a, err := t.c.Attach(ctx, t.cfg)
	if err != nil {
		return err
	}
	took := time.Since(t0)
	if err := a.Lease.Close(); err != nil {
		return err
	}
	if len(a.Manifest.Tensors) != t.n {
		return fmt.Errorf("manifest of %d tensors, the checkpoint has %d", len(a.Manifest.Tensors), t.n)
	}
	if keep {
		t.at = append(t.at, took)
	}
	return nil
}

func (t *genTarget) close() {
	if t.c != nil {
		t.c.Close()
	}
	_ = t.w.Close()
}
