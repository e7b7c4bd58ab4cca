package daemon

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
)

// recordingMetrics records every event in order.
type recordingMetrics struct {
	mu       sync.Mutex
	device   string
	loaded   []LoadStats
	tensors  int
	attached []time.Duration
	failures []AttachFailure
	leases   []int
	states   []State
	// held is the last DeviceBytes report.
	held    uint64
	heldGen []GenerationBytes
}

// record makes change to the record under its lock.
func (m *recordingMetrics) record(change func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	change()
}

func (m *recordingMetrics) factory(uuid string) (Metrics, error) {
	m.record(func() { m.device = uuid })
	return m, nil
}

func (m *recordingMetrics) Loaded(s LoadStats, tensors int) {
	m.record(func() { m.loaded, m.tensors = append(m.loaded, s), tensors })
}

func (m *recordingMetrics) Attached(took time.Duration) {
	m.record(func() { m.attached = append(m.attached, took) })
}

func (m *recordingMetrics) AttachFailed(r AttachFailure) {
	m.record(func() { m.failures = append(m.failures, r) })
}

func (m *recordingMetrics) Leases(n int) {
	m.record(func() { m.leases = append(m.leases, n) })
}

func (m *recordingMetrics) StateChanged(s State) {
	m.record(func() { m.states = append(m.states, s) })
}

func (m *recordingMetrics) DeviceBytes(total uint64, gens []GenerationBytes) {
	m.record(func() { m.held, m.heldGen = total, slices.Clone(gens) })
}

// snapshot copies the record.
func (m *recordingMetrics) snapshot() recordingMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	return recordingMetrics{device: m.device, loaded: slices.Clone(m.loaded), tensors: m.tensors,
		attached: slices.Clone(m.attached), failures: slices.Clone(m.failures),
		leases: slices.Clone(m.leases), states: slices.Clone(m.states), held: m.held, heldGen: slices.Clone(m.heldGen)}
}

func TestMetricsSeeLoadAttachesLeasesAndState(t *testing.T) {
	f := newFixture(t)
	rec := &recordingMetrics{}
	r := f.start(1, func(o *Options) { o.Metrics = rec.factory })
	info := r.d.Info()
	got := rec.snapshot()
	if got.device != f.uuids[1] {
		t.Errorf("factory called with %q, want %q", got.device, f.uuids[1])
	}
	if len(got.loaded) != 1 || !reflect.DeepEqual(got.loaded[0], info.Load) || got.tensors != info.Tensors {
		t.Errorf("loaded = %+v (%d tensors), want once %+v (%d tensors)", got.loaded, got.tensors, info.Load, info.Tensors)
	}
	if !slices.Equal(got.states, []State{StateServing}) || !slices.Equal(got.leases, []int{0}) {
		t.Errorf("after start: states %v leases %v, want [serving] [0]", got.states, got.leases)
	}
	if r.d.State() != StateServing {
		t.Errorf("State() = %s", r.d.State())
	}

	a := r.mustAttach(t)
	b := r.mustAttach(t)
	if _, err := r.attach(t, func(c *cacheconfig.Config) { c.EngineName = "another-engine" }); err == nil {
		t.Fatal("a mismatching attach succeeded")
	}
	if err := attachWithoutConfig(t, r); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an attach without a config: %v, want INVALID_ARGUMENT", err)
	}
	a.Lease.Close()
	waitFor(t, "one lease left", func() bool { return len(r.d.Leases()) == 1 })
	got = rec.snapshot()
	if len(got.attached) != 2 || got.attached[0] <= 0 || got.attached[1] <= 0 {
		t.Errorf("attached = %v, want two positive durations", got.attached)
	}
	if !slices.Equal(got.failures, []AttachFailure{AttachConfigMismatch, AttachOther}) {
		t.Errorf("failures = %v, want [config_mismatch other]", got.failures)
	}
	if !slices.Equal(got.leases, []int{0, 1, 2, 1}) {
		t.Errorf("lease counts = %v, want [0 1 2 1]", got.leases)
	}

	// A drain that times out: draining, an attach refused, serving again.
	c := r.dial(t)
	stopped := make(chan error, 1)
	go func() {
		_, err := c.Stop(context.Background(), false, time.Second)
		stopped <- err
	}()
	select {
	case <-b.Lease.Notices():
	case <-time.After(5 * time.Second):
		t.Fatal("no drain notice")
	}
	if r.d.State() != StateDraining {
		t.Errorf("State() during a drain = %s", r.d.State())
	}
	if _, err := r.attach(t, nil); status.Code(err) != codes.Unavailable {
		t.Errorf("attach while draining: %v, want UNAVAILABLE", err)
	}
	if err := <-stopped; status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stop = %v, want the drain to time out", err)
	}
	got = rec.snapshot()
	if !slices.Equal(got.states, []State{StateServing, StateDraining, StateServing}) {
		t.Errorf("states = %v, want [serving draining serving]", got.states)
	}
	if !slices.Equal(got.failures, []AttachFailure{AttachConfigMismatch, AttachOther, AttachDraining}) {
		t.Errorf("failures = %v, want [config_mismatch other draining]", got.failures)
	}

	b.Lease.Close()
	r.Cancel()
	if err := r.Wait(t); err != nil {
		t.Fatal(err)
	}
	got = rec.snapshot()
	if n := len(got.leases); got.leases[n-1] != 0 {
		t.Errorf("lease counts = %v, want the last 0", got.leases)
	}
	if n := len(got.states); got.states[n-1] != StateStopping {
		t.Errorf("states = %v, want the last stopping", got.states)
	}
}

// attachWithoutConfig sends an AttachRequest without a config (which
// core/client never does) and returns the stream's error.
func attachWithoutConfig(t *testing.T, r *running) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := r.rawRPC(t).Attach(ctx, &daemonv1.AttachRequest{ClientName: t.Name()})
	if err != nil {
		return err
	}
	_, err = stream.Recv()
	return err
}

// TestMetricsFactoryErrorFailsStart: a sink that cannot be made fails Start
// before anything is loaded, and Start undoes what it did.
func TestMetricsFactoryErrorFailsStart(t *testing.T) {
	f := newFixture(t)
	errNoSink := errors.New("no sink")
	p := f.plugin(nil)
	o := f.options(0)
	o.Metrics = func(string) (Metrics, error) { return nil, errNoSink }
	_, err := Start(context.Background(), p, o)
	if !errors.Is(err, errNoSink) {
		t.Fatalf("start = %v, want the factory's error", err)
	}
	<-p.Closed()
	p0, err := f.layout.For(f.uuids[0])
	if err != nil {
		t.Fatal(err)
	}
	assertGone(t, p0.Socket, p0.Ready)
}

// fakeStream is a grpc.ServerStream carrying only a context.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context { return s.ctx }

func TestMetricsAuthorizerReportsDeniedStreams(t *testing.T) {
	var denied []string
	a := authorizer{ownUID: 1000, denied: func(m string) { denied = append(denied, m) }}
	info := &grpc.StreamServerInfo{FullMethod: daemonv1.Daemon_Attach_FullMethodName}
	handled := false
	h := func(any, grpc.ServerStream) error { handled = true; return nil }
	if err := a.stream(nil, fakeStream{ctx: peerCtx(65534, 65534)}, info, h); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("stream of another uid = %v, want PERMISSION_DENIED", err)
	}
	if err := a.stream(nil, fakeStream{ctx: peerCtx(1000, 1000)}, info, h); err != nil || !handled {
		t.Fatalf("stream of the own uid = %v (handled %t)", err, handled)
	}
	if !slices.Equal(denied, []string{daemonv1.Daemon_Attach_FullMethodName}) {
		t.Errorf("denied = %v, want the one refused attach", denied)
	}
}

// TestMetricsNilSinkFromFactoryIsNoOp: a factory that returns no sink is the same
// as no Options.Metrics (which every other test runs without): the daemon
// serves and refuses as usual.
func TestMetricsNilSinkFromFactoryIsNoOp(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, func(o *Options) { o.Metrics = func(string) (Metrics, error) { return nil, nil } })
	a := r.mustAttach(t)
	if len(a.Manifest.Tensors) == 0 {
		t.Fatal("no tensors")
	}
	if _, err := r.attach(t, func(c *cacheconfig.Config) { c.EngineName = "another-engine" }); err == nil {
		t.Fatal("a mismatching attach succeeded")
	}
}
