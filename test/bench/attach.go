package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
)

// AttachCase is one manifest: a checkpoint size and tensor count.
type AttachCase struct {
	Model Model `json:"model"`
	// Status is a Status round trip on the same connection: the floor.
	Status Summary `json:"status_rtt"`
	// Attach is Attach on an open connection until the manifest is
	// received (the lease open); Release is Lease.Close until the stream
	// ended; DialAttach is a new connection plus Attach, as a fresh
	// process does.
	Attach     Summary `json:"attach"`
	Release    Summary `json:"release"`
	DialAttach Summary `json:"dial_attach"`
	// AttachOverFloor is Attach p50 / Status p50.
	AttachOverFloor float64 `json:"attach_over_floor"`
}

// AttachResult is the attach scenario's figures.
type AttachResult struct {
	Iterations int          `json:"iterations"`
	Cases      []AttachCase `json:"cases"`
	// Flatness is, per tensor count, attach p50 at the large size over
	// attach p50 at the small size.
	Flatness map[string]float64 `json:"flatness"`
}

// Targets of the attach scenario.
const (
	attachFlatGoal  = 1.2
	attachP50GoalMS = 2.0
	attachWarmup    = 30
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
	res := &AttachResult{Iterations: o.AttachIters, Flatness: map[string]float64{}}
	var checks []Target
	for i := 0; i < len(models); i += 2 {
		pair, err := attachPair(ctx, o, models[i:i+2])
		if err != nil {
			return nil, nil, fmt.Errorf("attach %d tensors: %w", models[i].Tensors, err)
		}
		for _, c := range pair {
			o.logf("attach: %d tensors, %d MiB: attach p50 %.3f ms p99 %.3f ms, status p50 %.3f ms",
				c.Model.Tensors, c.Model.Bytes>>20, c.Attach.MedianMS, c.Attach.P99MS, c.Status.MedianMS)
		}
		res.Cases = append(res.Cases, pair...)
		small, large := pair[0], pair[1]
		key := fmt.Sprintf("%d tensors", small.Model.Tensors)
		r := ratio(large.Attach.MedianMS, small.Attach.MedianMS)
		res.Flatness[key] = round3(r)
		if small.Model.Tensors <= o.FewTensors {
			for _, c := range pair {
				checks = append(checks, atMost(fmt.Sprintf("attach p50, %d tensors, %d MiB",
					c.Model.Tensors, c.Model.Bytes>>20), c.Attach.MedianMS, attachP50GoalMS, "ms"))
			}
		}
		checks = append(checks, atMost(fmt.Sprintf("flat in bytes: p50 %d MiB / %d MiB, %s",
			large.Model.Bytes>>20, small.Model.Bytes>>20, key), r, attachFlatGoal, "×"))
	}
	return res, checks, nil
}

// attachTarget is one daemon of a pair, with its open connection.
type attachTarget struct {
	m                 *Model
	w                 *world
	d                 *daemonProc
	c                 *client.Client
	cfg               cacheconfig.Config
	st, at, rel, dial []time.Duration
}

// attachPair serves both models and times Status, Attach, Release and
// Dial+Attach on each, alternating between them (and their order) at
// every iteration.
func attachPair(ctx context.Context, o Options, models []*Model) ([]AttachCase, error) {
	var ts []*attachTarget
	defer func() {
		for _, t := range ts {
			if t.c != nil {
				t.c.Close()
			}
			_ = t.w.Close()
		}
	}()
	for _, m := range models {
		w, d, cfg, err := serving(ctx, o, "attach", m)
		if err != nil {
			return nil, err
		}
		ts = append(ts, &attachTarget{m: m, w: w, d: d, cfg: cfg})
	}
	// Connect once every daemon is up, and use each connection at once:
	// core/client hands gRPC a connection dialed in Dial, and a daemon
	// closes a connection that sends nothing within its handshake timeout
	// (5 s), which a large checkpoint's load can exceed.
	for _, t := range ts {
		var err error
		if t.c, err = client.Dial(ctx, t.w.Target, client.Options{ClientName: "wcache-bench attach"}); err == nil {
			_, err = t.c.Status(ctx)
		}
		if err != nil {
			return nil, t.d.withOutput(err)
		}
	}
	for i := range attachWarmup + o.AttachIters {
		for k := range ts {
			t := ts[(i+k)%len(ts)]
			if err := t.iterate(ctx, i >= attachWarmup); err != nil {
				return nil, t.d.withOutput(err)
			}
		}
	}
	var out []AttachCase
	for _, t := range ts {
		c := AttachCase{Model: *t.m, Status: Summarize(t.st), Attach: Summarize(t.at), Release: Summarize(t.rel),
			DialAttach: Summarize(t.dial)}
		c.AttachOverFloor = round3(ratio(c.Attach.MedianMS, c.Status.MedianMS))
		out = append(out, c)
		if err := t.d.Stop(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// iterate times one Status, Attach, Release and Dial+Attach on t; keep
// records them.
func (t *attachTarget) iterate(ctx context.Context, keep bool) error {
	t0 := time.Now()
	if _, err := t.c.Status(ctx); err != nil {
		return err
	}
	t1 := time.Now()
	a, err := t.c.Attach(ctx, t.cfg)
	if err != nil {
		return err
	}
	t2 := time.Now()
	if err := a.Lease.Close(); err != nil {
		return err
	}
	t3 := time.Now()
	da, err := client.Attach(ctx, t.w.Target, t.cfg, client.Options{ClientName: "wcache-bench dial"})
	if err != nil {
		return err
	}
	t4 := time.Now()
	if err := da.Lease.Close(); err != nil {
		return err
	}
	if len(a.Manifest.Tensors) != t.m.Tensors {
		return fmt.Errorf("manifest of %d tensors, the checkpoint has %d", len(a.Manifest.Tensors), t.m.Tensors)
	}
	if keep {
		t.st, t.at = append(t.st, t1.Sub(t0)), append(t.at, t2.Sub(t1))
		t.rel, t.dial = append(t.rel, t3.Sub(t2)), append(t.dial, t4.Sub(t3))
	}
	return nil
}
