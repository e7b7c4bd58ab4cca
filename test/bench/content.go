package bench

import (
	"context"
	"fmt"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/sdk/filedigest"
	"github.com/wcache/wcache/sdk/fill"
	"github.com/wcache/wcache/test/benchreport"
)

// ContentResult is what proving that a client's files hold the daemon's
// bytes costs (docs/cacheconfig.md, "Content identity"): the four figures
// of issue 24, each ratio from the same rounds (the docs template, "Content
// identity", says how each is measured); rates in GiB/s, medians.
type ContentResult struct {
	Model             Model              `json:"model"`
	Readers           int                `json:"readers"`
	FillDigestGiBps   float64            `json:"fill_digest_gib_per_s"`
	FillNoDigestGiBps float64            `json:"fill_no_digest_gib_per_s"`
	FillRatio         float64            `json:"fill_ratio"`
	Attach            Summary            `json:"attach"`
	AttachIdentity    Summary            `json:"attach_identity"`
	AttachRatio       float64            `json:"attach_ratio"`
	HashModel         Model              `json:"hash_model"`
	HashGiBps         float64            `json:"hash_gib_per_s"`
	ReadGiBps         float64            `json:"read_gib_per_s"`
	HashRatio         float64            `json:"hash_ratio"`
	IdentityModel     Model              `json:"identity_model"`
	PythonIdentity    Summary            `json:"python_identity"`
	PythonStepsMS     map[string]float64 `json:"python_steps_ms"`
	HeaderDigest      Summary            `json:"header_digest"`
	Samples           series             `json:"samples_gib_per_s"`
}

// Goals of issue 24; the checkpoints' file count.
const (
	fillDigestGoal, attachIdentityGoal, hashReadGoal, pythonIdentityGoalMS = 0.9, 1.2, 0.8, 50
	contentFiles                                                           = 8
)

// runContent measures the four figures of content identity side by side.
func runContent(ctx context.Context, e *Env) (any, []Target, error) {
	m, err := e.warmModel(ModelSpec{Bytes: e.SmallBytes, Tensors: e.FewTensors, Files: contentFiles})
	if err != nil {
		return nil, nil, err
	}
	res := &ContentResult{Model: *m, Readers: fill.DefaultReaders(), Samples: series{}}
	for _, measure := range []func(context.Context, *Env, *ContentResult) error{fillDigest, attachIdentity, hashVsRead, pythonIdentity} {
		if err := measure(ctx, e, res); err != nil {
			return nil, nil, err
		}
	}
	id := res.IdentityModel
	return res, []Target{
		benchreport.AtLeast(fmt.Sprintf("fill with content digest / without, %d MiB, page cache warm", m.Bytes>>20), res.FillRatio, fillDigestGoal, "×"),
		benchreport.AtMost(fmt.Sprintf("attach p50 with the identity check / without, %d tensors in %d files", m.Tensors, m.Shards),
			res.AttachRatio, attachIdentityGoal, "×"),
		benchreport.AtLeast(fmt.Sprintf("hash an unknown copy / read it, %d MiB, page cache warm", res.HashModel.Bytes>>20), res.HashRatio, hashReadGoal, "×"),
		benchreport.AtMost(fmt.Sprintf("Python identity step (status + identities_match), %d tensors in %d files, median", id.Tensors, id.Shards),
			res.PythonIdentity.MedianMS, pythonIdentityGoalMS, "ms"),
		benchreport.Reported(fmt.Sprintf("Python header digest (checkpoint_digest) it makes unnecessary, %d tensors, median", id.Tensors),
			res.HeaderDigest.MedianMS, "ms"),
	}, nil
}

// memory is prefaulted host memory that a fill writes into.
type memory []byte

func (m memory) WriteAt(p []byte, off int64) (int, error) { return copy(m[off:], p), nil }

// fillDigest fills the model's files into prefaulted memory with and without the
// digest.
func fillDigest(_ context.Context, e *Env, res *ContentResult) error {
	extents, total, err := extentsOf(res.Model.Files)
	if err != nil {
		return err
	}
	dst := memory(patterned(int(total)))
	fillWith := func(digest bool) func() error {
		return func() error {
			_, err := fill.Fill(context.Background(), fill.WriterAt{W: dst}, total, extents, nil, fill.Options{Readers: res.Readers,
				Buffers: 2, BufferBytes: fill.DefaultBufferBytes, Direct: fill.DirectNever, NoDigest: !digest})
			return err
		}
	}
	err = e.alternate("content fill", total, res.Samples, map[string]func() error{"fill_digest": fillWith(true),
		"fill_no_digest": fillWith(false)})
	res.FillDigestGiBps, res.FillNoDigestGiBps, res.FillRatio = res.Samples.MedRatio("fill_digest", "fill_no_digest")
	return err
}

// attachIdentity serves the model and times Attach and AttachFiles, interleaved.
func attachIdentity(ctx context.Context, e *Env, res *ContentResult) error {
	m := &res.Model
	ts, stop, err := serveTargets(ctx, e.Options, "content", []*Model{m})
	if err != nil {
		return err
	}
	defer stop()
	t := ts[0]
	err = interleave(attachWarmup, e.AttachIters,
		t.timed("plain", func() (*client.Attachment, error) { return t.c.Attach(ctx, t.cfg) }),
		t.timed("identity", func() (*client.Attachment, error) {
			return t.c.AttachFiles(ctx, t.cfg, m.Files, client.ContentOptions{NoCache: true})
		}))
	if err != nil {
		return err
	}
	res.Attach, res.AttachIdentity = t.laps.Summary("plain"), t.laps.Summary("identity")
	res.AttachRatio = benchreport.Round3(benchreport.Ratio(res.AttachIdentity.MedianMS, res.Attach.MedianMS))
	e.logf("content attach: p50 %.3f ms, with the identity check %.3f ms", res.Attach.MedianMS, res.AttachIdentity.MedianMS)
	return t.d.Stop()
}

// hashVsRead hashes every file of a copy no daemon loaded and reads it the
// same way.
func hashVsRead(ctx context.Context, e *Env, res *ContentResult) error {
	spec := ModelSpec{Bytes: e.HashBytes, Tensors: e.FewTensors}
	m, err := e.warmModel(spec)
	if err != nil {
		return err
	}
	defer e.dropModel(spec)
	res.HashModel = *m
	extents, total, err := extentsOf(m.Files)
	if err != nil {
		return err
	}
	err = e.alternate("content hash", total, res.Samples, map[string]func() error{
		"read": func() error {
			_, err := fill.Fill(ctx, fill.WriterAt{}, total, extents, nil, fill.Options{Readers: res.Readers, Buffers: 1,
				BufferBytes: filedigest.LeafBytes, Direct: fill.DirectNever, NoDigest: true})
			return err
		},
		"hash": func() error {
			for _, f := range m.Files {
				if _, err := filedigest.File(ctx, f, filedigest.Options{Workers: res.Readers}); err != nil {
					return err
				}
			}
			return nil
		},
	})
	res.HashGiBps, res.ReadGiBps, res.HashRatio = res.Samples.MedRatio("hash", "read")
	return err
}

// pythonIdentity serves a checkpoint of IdentityTensors tensors and runs
// the Python identity step in fresh processes: one untimed, then Repeats.
func pythonIdentity(ctx context.Context, e *Env, res *ContentResult) error {
	spec := ModelSpec{Bytes: e.SmallBytes, Tensors: e.IdentityTensors, Files: contentFiles}
	defer e.dropModel(spec)
	s, err := e.serve(ctx, "identity", spec)
	if err != nil {
		return err
	}
	defer s.Close()
	m := s.m
	res.IdentityModel = *m
	all, err := e.freshRounds("content python identity", s.world, s.d, func(_ int, r HelperResult) error {
		if r.Tensors != m.Tensors {
			return fmt.Errorf("the daemon reports %d tensors, the checkpoint has %d", r.Tensors, m.Tensors)
		}
		return nil
	}, s.pythonArgv(pyIdentityStep, m.Dir, s.UUID))
	if err != nil {
		return err
	}
	runs := all[0]
	res.PythonIdentity, res.HeaderDigest, res.PythonStepsMS = runs.Summary("work"), runs.Summary("header_digest"), runs.MediansMS("work", "wall")
	return s.d.Stop()
}
