package bench

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/internal/parallel"
	"github.com/wcache/wcache/sdk/filedigest"
	"github.com/wcache/wcache/sdk/fill"
	"github.com/wcache/wcache/test/benchreport"
)

// ContentResult is what proving that a client's files hold the daemon's
// bytes costs (docs/cacheconfig.md, "Content identity"): the four figures
// of issue 24, each ratio from the same rounds (the docs template, "Content
// identity", says how each is measured): rates fill_digest,
// fill_no_digest, hash and read; times attach, attach_identity,
// python_identity and header_digest; ratios fill, attach and hash. rates
// and laps collect the samples.
type ContentResult struct {
	Model         Model              `json:"model"`
	Readers       int                `json:"readers"`
	HashModel     Model              `json:"hash_model"`
	IdentityModel Model              `json:"identity_model"`
	PythonStepsMS map[string]float64 `json:"python_steps_ms"`
	benchreport.Figures
	rates series
	laps  laps
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
	res := &ContentResult{Model: *m, Readers: fill.DefaultReaders(), rates: series{}, laps: laps{}}
	for _, measure := range []func(context.Context, *Env, *ContentResult) error{fillDigest, attachIdentity, hashVsRead, pythonIdentity} {
		if err := measure(ctx, e, res); err != nil {
			return nil, nil, err
		}
	}
	id, f := res.IdentityModel, benchreport.FiguresOf(res.laps, res.rates)
	res.Figures = f
	return res, []Target{
		benchreport.AtLeast(fmt.Sprintf("fill with content digest / without, %d MiB, page cache warm", m.Bytes>>20),
			f.Ratio("fill", "fill_digest", "fill_no_digest"), fillDigestGoal, "×"),
		benchreport.AtMost(fmt.Sprintf("attach p50 with the identity check / without, %d tensors in %d files", m.Tensors, m.Shards),
			f.Ratio("attach", "attach_identity", "attach"), attachIdentityGoal, "×"),
		benchreport.AtLeast(fmt.Sprintf("hash an unknown copy / read it, %d MiB, page cache warm", res.HashModel.Bytes>>20),
			f.Ratio("hash", "hash", "read"), hashReadGoal, "×"),
		benchreport.Reported(fmt.Sprintf("hash ceiling: BLAKE3 of in-memory 1 MiB leaves on %d goroutines ÷ reading the copy (the most hash ÷ read can reach here)", res.Readers),
			f.Ratio("hash_ceiling", "hash_mem_readers", "read"), "×"),
		benchreport.Reported(fmt.Sprintf("BLAKE3 of in-memory 1 MiB leaves, %d goroutines ÷ 1 (the cores' parallelism for hashing)", res.Readers),
			f.Ratio("hash_scaling", "hash_mem_readers", "hash_mem_1"), "×"),
		benchreport.AtMost(fmt.Sprintf("Python identity step (status + identities_match), %d tensors in %d files, median", id.Tensors, id.Shards),
			f.Times["python_identity"].MedianMS, pythonIdentityGoalMS, "ms"),
		benchreport.Reported(fmt.Sprintf("Python header digest (checkpoint_digest) it makes unnecessary, %d tensors, median", id.Tensors),
			f.Times["header_digest"].MedianMS, "ms"),
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
	return e.alternate("content fill", total, res.rates, map[string]func() error{"fill_digest": fillWith(true),
		"fill_no_digest": fillWith(false)})
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
		t.timed("attach", func() (*client.Attachment, error) { return t.c.Attach(ctx, t.cfg) }),
		t.timed("attach_identity", func() (*client.Attachment, error) {
			return t.c.AttachFiles(ctx, t.cfg, m.Files, client.ContentOptions{NoCache: true})
		}))
	if err != nil {
		return err
	}
	maps.Copy(res.laps, t.laps)
	e.logf("content attach: p50 %.3f ms, with the identity check %.3f ms", t.laps.Summary("attach").MedianMS, t.laps.Summary("attach_identity").MedianMS)
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
	mem := make([]byte, 64*filedigest.LeafBytes)
	rand.NewChaCha8([32]byte{24}).Read(mem)
	return e.alternate("content hash", total, res.rates, map[string]func() error{
		"hash_mem_1":       hashLeaves(mem, total, 1),
		"hash_mem_readers": hashLeaves(mem, total, res.Readers),
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
}

// hashLeaves hashes total bytes (rounded up to whole leaves) of 1 MiB
// leaves of mem, in memory and in the Default algorithm, on workers
// goroutines: what the machine's cores can hash with nothing read, the
// most a digest of files can reach beside reading them.
func hashLeaves(mem []byte, total uint64, workers int) func() error {
	return func() error {
		inMem := len(mem) / filedigest.LeafBytes
		return parallel.For(context.Background(), int(filedigest.LeafCount(int64(total))), workers, func(_, i int) error {
			off := (i % inMem) * filedigest.LeafBytes
			filedigest.Default.Leaf(mem[off : off+filedigest.LeafBytes])
			return nil
		})
	}
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
	res.laps["python_identity"], res.laps["header_digest"], res.PythonStepsMS = runs["work"], runs["header_digest"], runs.MediansMS("work", "wall")
	return s.d.Stop()
}
