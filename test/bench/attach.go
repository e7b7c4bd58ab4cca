package bench

import (
	"context"
	"fmt"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/test/benchreport"
)

// AttachCase is one manifest (a checkpoint size and tensor count): times
// status, a Status round trip on the open connection (the floor); attach,
// until the manifest arrived; release, until the stream ended; dial, a new
// connection plus Attach (as a fresh process does); ratio
// attach_over_floor, attach p50 ÷ status p50.
type AttachCase struct {
	Model Model `json:"model"`
	benchreport.Figures
}

// AttachResult is the attach scenario's figures.
type AttachResult struct {
	Cases    []AttachCase       `json:"cases"`
	Flatness map[string]float64 `json:"flatness"` // per tensor count: large ÷ small attach p50
}

// Targets of the attach scenario (the few-tensor p50: issue 37's; an
// attach after a publish keeps the earlier 2 ms).
const (
	attachFlatGoal, attachP50GoalMS, publishAttachGoalMS = 1.2, 0.5, 2.0
	attachWarmup                                         = 30
)

// runAttach measures attach latency on the four checkpoints, in pairs of
// the same tensor count (small checkpoint, large checkpoint): both daemons
// of a pair run at once and their attaches are interleaved, so that the
// flatness ratio compares figures taken under the same conditions.
func runAttach(ctx context.Context, e *Env) (any, []Target, error) {
	o := e.Options
	var models []*Model
	for _, spec := range []ModelSpec{e.smallFew(), e.largeFew(), e.smallMany(), e.largeMany()} {
		m, err := e.Model(spec)
		if err != nil {
			return nil, nil, err
		}
		models = append(models, m)
	}
	defer e.dropModel(e.largeMany())
	res := &AttachResult{Flatness: map[string]float64{}}
	var checks []Target
	for i := 0; i < len(models); i += 2 {
		pair, err := attachPair(ctx, o, models[i:i+2])
		if err != nil {
			return nil, nil, fmt.Errorf("attach %d tensors: %w", models[i].Tensors, err)
		}
		for _, c := range pair {
			o.logf("attach: %d tensors, %d MiB: attach p50 %.3f ms p99 %.3f ms, status p50 %.3f ms",
				c.Model.Tensors, c.Model.Bytes>>20, c.Times["attach"].MedianMS, c.Times["attach"].P99MS, c.Times["status"].MedianMS)
		}
		res.Cases = append(res.Cases, pair...)
		small, large := pair[0], pair[1]
		key := fmt.Sprintf("%d tensors", small.Model.Tensors)
		r := benchreport.Ratio(large.Times["attach"].MedianMS, small.Times["attach"].MedianMS)
		res.Flatness[key] = benchreport.Round3(r)
		if small.Model.Tensors <= o.FewTensors {
			for _, c := range pair {
				checks = append(checks, benchreport.AtMost(fmt.Sprintf("attach p50, %d tensors, %d MiB",
					c.Model.Tensors, c.Model.Bytes>>20), c.Times["attach"].MedianMS, attachP50GoalMS, "ms"))
			}
		}
		checks = append(checks, benchreport.AtMost(fmt.Sprintf("flat in bytes: p50 %d MiB / %d MiB, %s",
			large.Model.Bytes>>20, small.Model.Bytes>>20, key), r, attachFlatGoal, "×"))
	}
	return res, checks, nil
}

// serveTargets serves each model in a world of its own (beside[i], when
// given, loaded before models[i]) and connects to it; stop stops them all.
// Connect once every daemon is up, and use each connection at once:
// core/client hands gRPC a connection dialed in Dial, and a daemon closes a
// connection that sends nothing within its handshake timeout (5 s), which
// a large checkpoint's load can exceed.
func serveTargets(ctx context.Context, o Options, name string, models []*Model, beside ...[]*Model) (ts []*server, stop func(), err error) {
	stop = func() {
		for _, t := range ts {
			_ = t.Close()
		}
	}
	for i, m := range models {
		var b []*Model
		if i < len(beside) {
			b = beside[i]
		}
		t, err := serving(ctx, o, name, m, append(b, m)...)
		if err != nil {
			stop()
			return nil, nil, err
		}
		ts = append(ts, t)
	}
	for _, t := range ts {
		if err := t.connect(ctx, name); err != nil {
			stop()
			return nil, nil, err
		}
	}
	return ts, stop, nil
}

// attachPair serves both models and times Status, Attach, Release and
// Dial+Attach on each, alternating between them (and their order) at
// every iteration.
func attachPair(ctx context.Context, o Options, models []*Model) ([]AttachCase, error) {
	ts, stop, err := serveTargets(ctx, o, "attach", models)
	if err != nil {
		return nil, err
	}
	defer stop()
	var steps []func(bool) error
	for _, t := range ts {
		steps = append(steps, t.step(ctx))
	}
	if err := interleave(attachWarmup, o.AttachIters, steps...); err != nil {
		return nil, err
	}
	var out []AttachCase
	for _, t := range ts {
		c := AttachCase{Model: *t.m, Figures: benchreport.FiguresOf(t.laps, nil)}
		c.Ratio("attach_over_floor", "attach", "status")
		out = append(out, c)
		if err := t.d.Stop(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// step is one interleaved iteration on t (iterate, with the daemon's output
// on an error).
func (t *server) step(ctx context.Context) func(keep bool) error {
	return func(keep bool) error { return t.d.withOutput(t.iterate(ctx, keep)) }
}

// timed is an interleaved step on t that times attach (an Attach on t's
// connection, say) as key, then releases the lease.
func (t *server) timed(key string, attach func() (*client.Attachment, error)) func(keep bool) error {
	return func(keep bool) error {
		sw := t.laps.Start(keep)
		a, err := attach()
		if err != nil {
			return t.d.withOutput(err)
		}
		sw.Lap(key)
		return a.Lease.Close()
	}
}

// iterate times one Status, Attach, Release and Dial+Attach on t; keep
// records them.
func (t *server) iterate(ctx context.Context, keep bool) error {
	sw := t.laps.Start(keep)
	if _, err := t.c.Status(ctx); err != nil {
		return err
	}
	sw.Lap("status")
	a, err := t.c.Attach(ctx, t.cfg)
	if err != nil {
		return err
	}
	sw.Lap("attach")
	if err := a.Lease.Close(); err != nil {
		return err
	}
	sw.Lap("release")
	da, err := client.Attach(ctx, t.Target, t.cfg, client.Options{ClientName: "wcache-bench dial"})
	if err != nil {
		return err
	}
	sw.Lap("dial")
	if err := da.Lease.Close(); err != nil {
		return err
	}
	if len(a.Manifest.Tensors) != t.m.Tensors {
		return fmt.Errorf("manifest of %d tensors, the checkpoint has %d", len(a.Manifest.Tensors), t.m.Tensors)
	}
	return nil
}
