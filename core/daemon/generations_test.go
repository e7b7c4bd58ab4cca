package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon/daemontest/testworld"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// draftModel writes a second, smaller checkpoint (a draft model) in the
// fixture's directory.
func (f *fixture) draftModel() *safetensorstest.Result {
	f.t.Helper()
	return f.generate("draft", safetensorstest.GenOptions{Layers: 1, Seed: 7})
}

// withDraft loads the fixture's draft model as a second generation.
func withDraft(draft *safetensorstest.Result) func(*Options) {
	return func(o *Options) {
		o.Models = append(o.Models, Source{Model: draft.Dir, Config: cacheconfig.Default()})
	}
}

// attachGen attaches to r with the config of its generation i.
func (r *running) attachGen(t *testing.T, i int) *client.Attachment {
	t.Helper()
	gens := r.d.Generations()
	if i >= len(gens) {
		t.Fatalf("the daemon holds %d generations, want at least %d", len(gens), i+1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := client.Attach(ctx, client.BySocket(r.d.Info().Paths.Socket), gens[i].Config, client.Options{ClientName: t.Name()})
	if err != nil {
		t.Fatalf("attach to generation %d: %v", i, err)
	}
	t.Cleanup(func() { a.Lease.Close() })
	return a
}

// verifyAgainst checks that a's tensors are exactly dir's bytes.
func verifyAgainst(t *testing.T, a *client.Attachment, dir string) {
	t.Helper()
	ck, err := plan.OpenCheckpoint(dir, "", plan.ShardRanks{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Verify(context.Background(), a.Manifest, ck, client.VerifyOptions{}); err != nil {
		t.Fatalf("verify against %s: %v", dir, err)
	}
}

// TestTwoGenerationsServeTheirOwnBytes: a daemon started with a target and
// a draft model holds two generations; an attach with each config gets its
// own generation and exactly its own checkpoint's bytes, at the same time;
// Status lists both, and its total (and the metrics') is the sum of the
// arenas the backend reserved.
func TestTwoGenerationsServeTheirOwnBytes(t *testing.T) {
	f := newFixture(t)
	draft := f.draftModel()
	var allocs atomic.Int64
	rec := &recordingMetrics{}
	p := f.plugin(countAllocations(&allocs, 1<<20))
	o := f.options(0)
	withDraft(draft)(&o)
	o.Metrics = rec.factory
	d, err := Start(context.Background(), p, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	r := &running{d: d, p: p}

	gens := d.Generations()
	if len(gens) != 2 || gens[0].ID == gens[1].ID || gens[0].ConfigDigest == gens[1].ConfigDigest {
		t.Fatalf("generations = %+v, want two distinct", gens)
	}
	target, dr := r.attachGen(t, 0), r.attachGen(t, 1)
	if target.Manifest.Generation != gens[0].ID || dr.Manifest.Generation != gens[1].ID {
		t.Fatalf("attached generations %d and %d, want %d and %d", target.Manifest.Generation, dr.Manifest.Generation, gens[0].ID, gens[1].ID)
	}
	verifyAgainst(t, target, f.model.Dir)
	verifyAgainst(t, dr, draft.Dir)

	st := d.statusProto()
	if len(st.GetGenerations()) != 2 || len(st.GetLeases()) != 2 {
		t.Fatalf("status: %d generations, %d leases", len(st.GetGenerations()), len(st.GetLeases()))
	}
	var sum uint64
	for _, g := range st.GetGenerations() {
		if len(g.GetLeases()) != 1 || g.GetLeases()[0].GetGeneration() != g.GetGeneration() {
			t.Errorf("generation %d: leases %v", g.GetGeneration(), g.GetLeases())
		}
		sum += g.GetDeviceBytes()
	}
	n := uint64(allocs.Load())
	if sum != n<<20 || st.GetDeviceBytesTotal() != sum {
		t.Fatalf("device bytes: generations sum to %d, total %d; the backend reserved %d arenas of 1 MiB", sum, st.GetDeviceBytesTotal(), n)
	}
	if m := rec.snapshot(); m.held != sum || len(m.heldGen) != 2 {
		t.Fatalf("metrics: held %d over %d generations, want %d over 2", m.held, len(m.heldGen), sum)
	}

	// A config that matches neither is refused with the nearest one's
	// differing fields, naming it.
	other := gens[1].Config
	other.Quantization = "fp8"
	_, err = client.Attach(context.Background(), client.BySocket(d.Info().Paths.Socket), other, client.Options{})
	me, ok := client.IsMismatch(err)
	if !ok || me.Generations != 2 || me.Generation != gens[1].ID || len(me.Diffs) != 1 {
		t.Fatalf("attach with another dtype: %v (%+v), want the draft's one diff", err, me)
	}
}

// TestPublishBesideAndEvictOne: a publish into a daemon that holds a
// model adds a generation; the same config twice is still refused; an
// evict without a name is refused while two are held; evicting the
// published one by digest leaves the loaded one's lease untouched.
func TestPublishBesideAndEvictOne(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, allowHeaders)
	loaded := r.mustAttach(t)
	c := r.dial(t)
	ctx := context.Background()
	pub := publication()
	res, err := c.Publish(ctx, pub, client.ShmFill(fillBytes, false))
	if err != nil {
		t.Fatalf("publish beside a loaded model: %v", err)
	}
	if _, err := c.Publish(ctx, pub, client.ShmFill(fillBytes, false)); !errors.Is(err, client.ErrHoldsWeights) {
		t.Fatalf("the same publish twice = %v, want ErrHoldsWeights", err)
	}
	published, err := client.Attach(ctx, client.BySocket(r.d.Info().Paths.Socket), pub.Config, client.Options{})
	if err != nil || published.Manifest.Generation != res.Generation {
		t.Fatalf("attach to the published generation: %v", err)
	}
	defer published.Lease.Close()

	if _, _, err := c.Evict(ctx, time.Second); codeOf(err) != codes.FailedPrecondition {
		t.Fatalf("evict naming nothing with two generations = %v, want FAILED_PRECONDITION", err)
	}
	if _, err := c.EvictSelected(ctx, client.EvictSelector{ConfigDigest: "nope"}, time.Second); codeOf(err) != codes.NotFound {
		t.Fatalf("evict of an unknown digest = %v, want NOT_FOUND", err)
	}
	// The published generation's lease goes when the evict asks.
	go func() {
		<-published.Lease.Notices()
		published.Lease.Close()
	}()
	ev, err := c.EvictSelected(ctx, client.EvictSelector{ConfigDigest: res.ConfigDigest}, 5*time.Second)
	if err != nil || len(ev.Generations) != 1 || ev.Generations[0] != res.Generation || ev.Leases != 1 {
		t.Fatalf("evict the published generation = %+v, %v", ev, err)
	}
	select {
	case <-loaded.Lease.Done():
		t.Fatalf("the loaded model's lease ended: %v", loaded.Lease.Err())
	default:
	}
	gens := r.d.Generations()
	if len(gens) != 1 || gens[0].ID != loaded.Manifest.Generation || gens[0].Leases != 1 {
		t.Fatalf("after the evict: %+v", gens)
	}
	verifyAgainst(t, r.mustAttach(t), f.model.Dir)
}

// TestPublishPastMaxBytesRefusedBeforeAllocating: with a cap just above
// what the loaded model holds, a publish that would pass it is
// RESOURCE_EXHAUSTED naming the numbers, the backend sees no Allocate, and
// the loaded generation's lease and attaches are untouched; a publish that
// fails midway does not disturb it either.
func TestPublishPastMaxBytesRefusedBeforeAllocating(t *testing.T) {
	f := newFixture(t)
	_, pl := testworld.Plan(t, f.model.Dir)
	var allocs atomic.Int64
	r := f.startWith(0, f.plugin(countAllocations(&allocs, 1)), func(o *Options) { o.MaxBytes = pl.AllocatedBytes() + 4096 })
	lease := r.mustAttach(t)
	before := r.d.HeldBytes()
	c := r.dial(t)
	pub := publication()
	pub.Tensors = []client.TensorSpec{{Name: "big", DType: "U8", Shape: []uint64{1 << 16}, Length: 1 << 16}}
	n := allocs.Load()
	_, err := c.Publish(context.Background(), pub, client.ShmFill(fillBytes, false))
	if codeOf(err) != codes.ResourceExhausted || allocs.Load() != n {
		t.Fatalf("publish past --max-bytes = %v (%d allocations), want RESOURCE_EXHAUSTED before any", err, allocs.Load()-n)
	}
	if len(r.d.Generations()) != 1 || r.d.HeldBytes() != before {
		t.Fatalf("after the refusal: %d generations, %d bytes held (was %d)", len(r.d.Generations()), r.d.HeldBytes(), before)
	}
	// A publish whose fill fails is aborted: only its own generation goes.
	small := publication()
	_, err = c.Publish(context.Background(), small, client.ShmFill(func(int, []byte) error { return errors.New("engine crashed") }, false))
	if err == nil {
		t.Fatal("a publish whose fill failed was committed")
	}
	select {
	case <-lease.Lease.Done():
		t.Fatalf("the loaded model's lease ended: %v", lease.Lease.Err())
	default:
	}
	waitFor(t, "the failed publish's generation to go", func() bool { return len(r.d.Generations()) == 1 })
	if gens := r.d.Generations(); gens[0].Leases != 1 || r.d.HeldBytes() != before {
		t.Fatalf("after a failed publish: %+v, %d bytes held (was %d)", gens, r.d.HeldBytes(), before)
	}
	r.mustAttach(t)
}

// codeOf is the gRPC code of err, through any wrapping.
func codeOf(err error) codes.Code {
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if s, ok := status.FromError(e); ok {
			return s.Code()
		}
	}
	return codes.Unknown
}

// TestPluginRestartImportsEveryGeneration: with descriptor handles a new
// plugin imports the allocations of both generations; both leases stay.
func TestPluginRestartImportsEveryGeneration(t *testing.T) {
	f := newFixture(t)
	f.memfd = true
	draft := f.draftModel()
	r := f.start(0, func(o *Options) {
		withDraft(draft)(o)
		o.RestartPlugin = func(context.Context) (Plugin, error) { return f.plugin(nil), nil }
	})
	a, b := r.attachGen(t, 0), r.attachGen(t, 1)
	if err := r.p.Die("signal: killed"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the plugin restart", func() bool { return r.d.statusProto().GetStartPhases().GetPluginRestarts() == 1 })
	for _, l := range []*client.Attachment{a, b} {
		select {
		case <-l.Lease.Done():
			t.Fatalf("a lease ended with the plugin: %v", l.Lease.Err())
		default:
		}
	}
	verifyAgainst(t, r.attachGen(t, 0), f.model.Dir)
	verifyAgainst(t, r.attachGen(t, 1), draft.Dir)
}

// TestTakeoverHandsOverEveryGeneration: a successor started with Takeover
// receives both generations (same ids, same bytes, nothing loaded).
func TestTakeoverHandsOverEveryGeneration(t *testing.T) {
	f := newFixture(t)
	f.memfd = true
	draft := f.draftModel()
	old := f.start(0, withDraft(draft))
	want := old.d.Generations()
	o := f.options(0)
	o.Model, o.Takeover = "", true
	d := f.run(f.plugin(nil), o).d
	if err := old.Wait(t); err != nil {
		t.Fatalf("the daemon taken over: %v", err)
	}
	got := d.Generations()
	if len(got) != 2 {
		t.Fatalf("the successor holds %d generations, want 2", len(got))
	}
	for i := range got {
		if got[i].ID != want[i].ID || got[i].ConfigDigest != want[i].ConfigDigest || got[i].Load.Source != SourceTakeover {
			t.Errorf("generation %d: %+v, want id %d digest %s by takeover", i, got[i], want[i].ID, want[i].ConfigDigest)
		}
	}
	r := &running{d: d}
	verifyAgainst(t, r.attachGen(t, 0), f.model.Dir)
	verifyAgainst(t, r.attachGen(t, 1), draft.Dir)
}

// TestConcurrentPublishesNeverOvercommit: publishes of six different
// configs at once into a daemon whose cap fits three: exactly three are
// served, the others are RESOURCE_EXHAUSTED, and what the daemon holds is
// three publications' arenas, never more.
func TestConcurrentPublishesNeverOvercommit(t *testing.T) {
	f := newFixture(t)
	probe := f.startEmpty(nil)
	c := probe.dial(t)
	if _, err := c.Publish(context.Background(), publication(), client.ShmFill(fillBytes, false)); err != nil {
		t.Fatal(err)
	}
	need := probe.d.HeldBytes()
	r := f.start(1, func(o *Options) { o.Model, o.MaxBytes = "", 3*need })
	c1 := r.dial(t)
	errs := make(chan error, 6)
	for i := range 6 {
		go func() {
			pub := publication()
			pub.Config.Model = fmt.Sprintf("org/model-%d", i)
			_, err := c1.Publish(context.Background(), pub, client.ShmFill(fillBytes, false))
			errs <- err
		}()
	}
	served, refused := 0, 0
	for range 6 {
		switch err := <-errs; {
		case err == nil:
			served++
		case codeOf(err) == codes.ResourceExhausted:
			refused++
		default:
			t.Errorf("publish: %v", err)
		}
	}
	if served != 3 || refused != 3 || r.d.HeldBytes() != 3*need || len(r.d.Generations()) != 3 {
		t.Fatalf("%d served, %d refused, %d bytes held over %d generations; want 3, 3, %d over 3",
			served, refused, r.d.HeldBytes(), len(r.d.Generations()), 3*need)
	}
}
