package registry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
)

// testRegistry's manifest and publish descriptors are strings: the
// registry never looks into them.
type testRegistry = Registry[string, string]

var (
	cfgA = cacheconfig.Config{Model: "org/a", DType: "bfloat16"}
	cfgB = cacheconfig.Config{Model: "org/b", DType: "bfloat16"}
)

// serving adds a serving generation of cfg with manifest m.
func serving(r *testRegistry, cfg cacheconfig.Config, m string) *Generation[string, string] {
	g := &Generation[string, string]{State: StateServing, Config: cfg, Digest: cfg.Digest(), Model: cfg.Model,
		Compare: cacheconfig.Compare, Manifest: m}
	r.Add(g)
	return g
}

// attach runs MatchAttach for cfg and names its outcome: "lease", "busy
// <state>", "empty <state> <pid>", "mismatch", or the refusal's text.
func attach(r *testRegistry, cfg cacheconfig.Config, pid int32) (*Lease[string, string], string) {
	l, why, err := MatchAttach(r, cfg, Peer{PID: pid, UID: 1000}, "test", AttachAnswers[string, string, string]{
		Accept: func(*Generation[string, string]) (string, error) { return "", nil },
		Busy:   func(st State) (string, error) { return "busy " + st.String(), errors.New("busy") },
		Empty: func(st State, p int32) (string, error) {
			return fmt.Sprintf("empty %s %d", st, p), errors.New("empty")
		},
		Mismatch: func([]cacheconfig.FieldDiff, *Generation[string, string], int) (string, error) {
			return "mismatch", errors.New("mismatch")
		},
	})
	if err != nil {
		return nil, why
	}
	return l, "lease"
}

func TestPublishStateMachine(t *testing.T) {
	r := New[string, string]()
	if st := r.CurrentState(); st != StateEmpty {
		t.Fatalf("new registry is %s, want empty", st)
	}
	pub, g, err := r.BeginPublish(Peer{PID: 7, UID: 1000}, "pub", cfgA, cacheconfig.ComparePublished, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st := r.CurrentState(); st != StatePublishing {
		t.Fatalf("state %s during a publish, want publishing", st)
	}
	if _, why := attach(r, cfgA, 3); why != "empty publishing 7" {
		t.Fatalf("attach during the publish: %q", why)
	}
	var ce *PublishConflictError
	if _, _, err := r.BeginPublish(Peer{PID: 8}, "other", cfgA, cacheconfig.ComparePublished, time.Now()); !errors.As(err, &ce) ||
		ce.Reason != ConflictInProgress || ce.PublisherPID != 7 {
		t.Fatalf("second publish of the config: %v, want ConflictInProgress by pid 7", err)
	}
	pubB, _, err := r.BeginPublish(Peer{PID: 9}, "b", cfgB, cacheconfig.ComparePublished, time.Now())
	if err != nil {
		t.Fatalf("a publish of another config is refused: %v", err)
	}
	r.SetPublishFiles(pub, "descriptors A")
	if p, files := r.PublishFor(pub.ID); p != pub || files != "descriptors A" {
		t.Fatalf("PublishFor(%d) = %v, %q", pub.ID, p, files)
	}
	r.RecordAttachFallback(cfgA.Digest(), "peer had other bytes")
	if !r.FinishPublish(pub, true, func(g *Generation[string, string]) { g.Manifest = "manifest A" }) {
		t.Fatal("commit refused")
	}
	if g.State != StateServing || g.Load.FillFallback != "peer had other bytes" {
		t.Fatalf("committed generation: state %s, fill fallback %q", g.State, g.Load.FillFallback)
	}
	if l, why := attach(r, cfgA, 3); why != "lease" || l.Manifest != "manifest A" || l.Gen != g {
		t.Fatalf("attach after the commit: %q", why)
	}
	if _, _, err := r.BeginPublish(Peer{PID: 8}, "again", cfgA, cacheconfig.ComparePublished, time.Now()); !errors.As(err, &ce) ||
		ce.Reason != ConflictHoldsWeights || ce.ConfigDigest != cfgA.Digest() {
		t.Fatalf("publish of a served config: %v, want ConflictHoldsWeights", err)
	}
	if !r.AbortPublish(pubB) || r.Count() != 1 {
		t.Fatalf("abort: %d generations left, want 1", r.Count())
	}
	if r.FinishPublish(pubB, true, func(*Generation[string, string]) {}) {
		t.Fatal("an aborted publish committed")
	}
	if p, _ := r.PublishFor(pubB.ID); p != nil {
		t.Fatal("an aborted publish still hands out descriptors")
	}
}

func TestStopEndsPublishesAndLeases(t *testing.T) {
	r := New[string, string]()
	serving(r, cfgA, "A")
	l, why := attach(r, cfgA, 3)
	if why != "lease" {
		t.Fatal(why)
	}
	pub, _, err := r.BeginPublish(Peer{PID: 9}, "b", cfgB, cacheconfig.ComparePublished, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	stopErr := errors.New("daemon stopped")
	if n := r.Stop(stopErr); n != 1 {
		t.Fatalf("Stop ended %d leases, want 1", n)
	}
	select {
	case <-l.Ended:
	default:
		t.Fatal("the lease was not ended")
	}
	if l.EndErr != stopErr {
		t.Fatalf("lease ended with %v", l.EndErr)
	}
	if !pub.isEnded() {
		t.Fatal("the publish was not ended")
	}
	if r.FinishPublish(pub, true, func(*Generation[string, string]) {}) {
		t.Fatal("a publish committed after Stop")
	}
	if st := r.CurrentState(); st != StateStopping {
		t.Fatalf("state %s, want stopping", st)
	}
	if _, why := attach(r, cfgA, 4); why != "busy stopping" {
		t.Fatalf("attach after Stop: %q", why)
	}
}

func TestEvictDrainsOnlyTheNamedGeneration(t *testing.T) {
	r := New[string, string]()
	a, b := serving(r, cfgA, "A"), serving(r, cfgB, "B")
	if _, err := r.SelectForEvict(client.EvictSelector{}); err == nil {
		t.Fatal("an evict naming nothing while two generations are held was accepted")
	}
	var se *SelectError
	if _, err := r.SelectForEvict(client.EvictSelector{Model: "org/none"}); !errors.As(err, &se) || !Named(se.Selector) || len(se.Held) != 2 {
		t.Fatalf("an evict naming no held model: %v", err)
	}
	la, _ := attach(r, cfgA, 3)
	gens, err := r.SelectForEvict(client.EvictSelector{Generation: a.ID})
	if err != nil || len(gens) != 1 || gens[0] != a {
		t.Fatalf("select generation %d: %v, %v", a.ID, gens, err)
	}
	notice := &daemonv1.Notice{Kind: daemonv1.Notice_KIND_DRAINING}
	res, ok := r.BeginEvict(gens, notice)
	if !ok || res.Leases != 1 {
		t.Fatalf("BeginEvict: %+v, %v", res, ok)
	}
	select {
	case n := <-la.Notices:
		if n != notice {
			t.Fatalf("lease got %v", n)
		}
	default:
		t.Fatal("the drained generation's lease got no notice")
	}
	if _, why := attach(r, cfgA, 4); why != "busy draining" {
		t.Fatalf("attach to the draining generation: %q", why)
	}
	if _, why := attach(r, cfgB, 4); why != "lease" {
		t.Fatalf("attach to the other generation: %q", why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r.WaitEmpty(ctx, gens) {
		t.Fatal("WaitEmpty reported no lease while one is left")
	}
	// Given up: the generation serves again.
	if _, ok := r.EndEvict(gens, false); !ok || a.State != StateServing {
		t.Fatalf("after a given-up evict generation %d is %s", a.ID, a.State)
	}
	if _, ok := r.BeginEvict(gens, notice); !ok {
		t.Fatal("second BeginEvict refused")
	}
	r.Remove(la)
	if !r.WaitEmpty(context.Background(), gens) {
		t.Fatal("WaitEmpty: a lease is left after Remove")
	}
	freed, ok := r.EndEvict(gens, true)
	if !ok || len(freed) != 1 || freed[0] != a {
		t.Fatalf("EndEvict freed %v, %v", freed, ok)
	}
	if all := r.All(); len(all) != 1 || all[0] != b {
		t.Fatalf("left: %v, want generation %d only", all, b.ID)
	}
}
