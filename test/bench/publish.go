package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/safetensors"
)

// PublishResult is the publish scenario's figures: a publish of the large
// checkpoint into an empty daemon by a client (as `wcache publish` does:
// core/client Publish with ShmFill copying from the files), medians over
// Runs, each run in a world of its own. PublishGiBps is bytes over the
// whole Publish call (table, the daemon's plan, allocation and export, the
// copy, the commit); FillGiBps bytes over the copy alone (ShmFill: mapping
// the writable handles, pread from the files into them). FreshMemcpyGiBps
// is a memcpy of the same byte count into a new sparse file of the
// shared-memory folder on one thread (as ShmFill copies), right after each
// publish; Ratio, the target's figure, is PublishGiBps / FreshMemcpyGiBps.
// Attach is an Attach on an open connection to the published weights
// until the manifest arrived, as in the attach scenario.
type PublishResult struct {
	Model            Model   `json:"model"`
	Runs             int     `json:"runs"`
	PublishGiBps     float64 `json:"publish_gib_per_s"`
	FillGiBps        float64 `json:"fill_gib_per_s"`
	FreshMemcpyGiBps float64 `json:"fresh_memcpy_gib_per_s"`
	Ratio            float64 `json:"ratio"`
	Attach           Summary `json:"attach"`
	Samples          series  `json:"samples_gib_per_s"`
}

// publishAttachIters bounds the timed attaches after each publish.
const publishAttachIters = 100

// runPublish publishes the large checkpoint into an empty daemon Repeats
// times; after each publish it times attaches to the published weights and
// a memcpy of the same size into fresh shared memory.
func runPublish(ctx context.Context, e *Env) (any, []Target, error) {
	o := e.Options
	m, err := e.warmModel(e.largeFew()) // the publisher's source is in memory
	if err != nil {
		return nil, nil, err
	}
	ck, err := safetensors.OpenCheckpoint(m.Dir)
	if err != nil {
		return nil, nil, err
	}
	res := &PublishResult{Model: *m, Runs: o.Repeats, Samples: series{}}
	var attaches []time.Duration
	for i := range o.Repeats {
		pub, fill, at, err := publishOnce(ctx, o, m, ck)
		if err != nil {
			return nil, nil, fmt.Errorf("publish run %d: %w", i+1, err)
		}
		fm, err := freshMemcpy(o.ShmDir, int64(m.Bytes), 1)
		if err != nil {
			return nil, nil, err
		}
		attaches = append(attaches, at...)
		res.Samples.add("publish", gibps(m.Bytes, pub))
		res.Samples.add("fill", gibps(m.Bytes, fill))
		res.Samples.add("fresh_memcpy", gibps(fm.Bytes, fm.Fill))
		o.logf("publish %d/%d: %.2f GiB/s (copy %.2f), memcpy into fresh shm %.2f GiB/s", i+1, o.Repeats,
			res.Samples.last("publish"), res.Samples.last("fill"), res.Samples.last("fresh_memcpy"))
	}
	res.PublishGiBps, res.FillGiBps = res.Samples.med("publish"), res.Samples.med("fill")
	res.FreshMemcpyGiBps = res.Samples.med("fresh_memcpy")
	res.Ratio = round3(ratio(res.PublishGiBps, res.FreshMemcpyGiBps))
	res.Attach = Summarize(attaches)
	return res, []Target{
		atLeast(fmt.Sprintf("publish of %d MiB / memcpy into fresh shared memory (one thread)", m.Bytes>>20), res.Ratio, fillRatioGoal, "×"),
		atMost(fmt.Sprintf("attach p50 after a publish, %d tensors, %d MiB", m.Tensors, m.Bytes>>20), res.Attach.MedianMS, attachP50GoalMS, "ms"),
	}, nil
}

// publishOnce starts an empty daemon, publishes ck into it and times the
// publish, its copy and publishAttachIters attaches (after attachWarmup
// untimed ones); it stops the daemon.
func publishOnce(ctx context.Context, o Options, m *Model, ck *safetensors.Checkpoint) (pub, fill time.Duration, attaches []time.Duration, err error) {
	w, err := newWorld(o, "publish", m)
	if err != nil {
		return 0, 0, nil, err
	}
	defer w.Close()
	d, err := w.startServe(ctx, nil)
	if err != nil {
		return 0, 0, nil, err
	}
	cfg, err := w.engineConfig(ctx, m.Dir)
	if err != nil {
		return 0, 0, nil, d.withOutput(err)
	}
	c, err := client.Dial(ctx, w.Target, client.Options{ClientName: "wcache-bench publish"})
	if err != nil {
		return 0, 0, nil, d.withOutput(err)
	}
	defer c.Close()
	publication, src, err := client.OpenCheckpointPublication(ctx, ck, cfg)
	if err != nil {
		return 0, 0, nil, err
	}
	defer src.Close()
	shmFill := client.ShmFill(src.Copy, false)
	begin := time.Now()
	r, err := c.Publish(ctx, publication, func(ctx context.Context, plan *client.PublishPlan) ([][]byte, error) {
		t := time.Now()
		sums, err := shmFill(ctx, plan)
		fill = time.Since(t)
		return sums, err
	})
	pub = time.Since(begin)
	if err != nil {
		return 0, 0, nil, d.withOutput(err)
	}
	if r.Bytes < m.Bytes || r.Tensors != m.Tensors {
		return 0, 0, nil, fmt.Errorf("published %d tensors, %d bytes; the checkpoint has %d, %d", r.Tensors, r.Bytes, m.Tensors, m.Bytes)
	}
	// The daemon filled in its device capability: attach as an engine
	// that knows it.
	if cfg, err = w.engineConfig(ctx, m.Dir); err != nil {
		return 0, 0, nil, d.withOutput(err)
	}
	for i := range attachWarmup + publishAttachIters {
		t := time.Now()
		a, err := c.Attach(ctx, cfg)
		took := time.Since(t)
		if err != nil {
			return 0, 0, nil, d.withOutput(err)
		}
		if err := a.Lease.Close(); err != nil {
			return 0, 0, nil, err
		}
		if i >= attachWarmup {
			attaches = append(attaches, took)
		}
	}
	return pub, fill, attaches, d.Stop()
}
