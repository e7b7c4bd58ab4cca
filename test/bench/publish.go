package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/test/benchreport"
)

// PublishResult is the publish scenario's figures (the docs template,
// "Publish", says what each is): rates publish, fill (its copy) and
// fresh_memcpy; ratio publish (÷ fresh_memcpy); times attach, attaches to
// the published weights.
type PublishResult struct {
	Model Model `json:"model"`
	benchreport.Figures
}

// publishAttachIters bounds the timed attaches after each publish.
const publishAttachIters = 100

// runPublish publishes the large checkpoint into an empty daemon Repeats
// times, each followed by attaches and the memcpy baseline.
func runPublish(ctx context.Context, e *Env) (any, []Target, error) {
	m, err := e.warmModel(e.largeFew()) // the publisher's source is in memory
	if err != nil {
		return nil, nil, err
	}
	ck, err := safetensors.OpenCheckpoint(m.Dir)
	if err != nil {
		return nil, nil, err
	}
	rates, attaches := series{}, laps{}
	err = e.rounds("publish", e.Repeats, func(int) (string, error) {
		pub, fill, err := publishOnce(ctx, e.Options, m, ck, attaches)
		var fm fillTiming
		if err == nil {
			fm, err = freshMemcpy(e.ShmDir, int64(m.Bytes), 1)
		}
		rates.Add("publish", benchreport.GiBps(m.Bytes, pub))
		rates.Add("fill", benchreport.GiBps(m.Bytes, fill))
		rates.Add("fresh_memcpy", fm.rate())
		return fmt.Sprintf("%.2f GiB/s (copy %.2f), memcpy into fresh shm %.2f GiB/s", rates.Last("publish"),
			rates.Last("fill"), rates.Last("fresh_memcpy")), err
	})
	if err != nil {
		return nil, nil, err
	}
	res := &PublishResult{Model: *m, Figures: benchreport.FiguresOf(attaches, rates)}
	return res, []Target{
		benchreport.AtLeast(fmt.Sprintf("publish of %d MiB / memcpy into fresh shared memory (one thread)", m.Bytes>>20),
			res.Ratio("publish", "publish", "fresh_memcpy"), fillRatioGoal, "×"),
		benchreport.AtMost(fmt.Sprintf("attach p50 after a publish, %d tensors, %d MiB", m.Tensors, m.Bytes>>20), res.Times["attach"].MedianMS, publishAttachGoalMS, "ms"),
	}, nil
}

// publishOnce starts an empty daemon, publishes ck into it, times the
// publish and its copy, then publishAttachIters attaches into attaches
// (after attachWarmup untimed ones), and stops the daemon.
func publishOnce(ctx context.Context, o Options, m *Model, ck *safetensors.Checkpoint, attaches laps) (pub, fill time.Duration, err error) {
	s, err := serving(ctx, o, "publish", m)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	if err := s.connect(ctx, "publish"); err != nil {
		return 0, 0, err
	}
	publication, src, err := client.OpenCheckpointPublication(ctx, ck, s.cfg)
	if err != nil {
		return 0, 0, err
	}
	defer src.Close()
	shmFill := client.ShmFill(src.Copy, false)
	begin := time.Now()
	r, err := s.c.Publish(ctx, publication, func(ctx context.Context, plan *client.PublishPlan) ([][]byte, error) {
		t := time.Now()
		defer func() { fill = time.Since(t) }()
		return shmFill(ctx, plan)
	})
	pub = time.Since(begin)
	if err == nil && (r.Bytes < m.Bytes || r.Tensors != m.Tensors) {
		err = fmt.Errorf("published %d tensors, %d bytes; the checkpoint has %d, %d", r.Tensors, r.Bytes, m.Tensors, m.Bytes)
	}
	if err == nil { // the daemon filled in its device capability: attach as an engine that knows it
		s.cfg, err = s.engineConfig(ctx, m.Dir)
	}
	if err == nil {
		s.laps = attaches
		err = interleave(attachWarmup, publishAttachIters, s.timed("attach", func() (*client.Attachment, error) { return s.c.Attach(ctx, s.cfg) }))
	}
	if err != nil {
		return 0, 0, s.d.withOutput(err)
	}
	return pub, fill, s.d.Stop()
}
