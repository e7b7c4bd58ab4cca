package daemon

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// publishN starts an empty daemon and publishes n one-byte tensors named
// as a large checkpoint's are (model.layers.N.<module>.weight), so that an
// attach's manifest has n entries.
func publishN(tb testing.TB, n int, sink Metrics) (*running, client.Publication) {
	tb.Helper()
	f := newFixture(tb)
	p := f.plugin(nil)
	o := f.options(0)
	o.Model = ""
	if sink != nil {
		o.Metrics = func(string) (Metrics, error) { return sink, nil }
	}
	r := f.run(p, o)
	c, err := client.Dial(context.Background(), client.BySocket(r.d.Info().Paths.Socket), client.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	pub := publication()
	pub.Tensors = make([]client.TensorSpec, n)
	modules := []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
		"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm"}
	for i := range pub.Tensors {
		pub.Tensors[i] = client.TensorSpec{Name: fmt.Sprintf("model.layers.%d.%s.weight", i/len(modules), modules[i%len(modules)]),
			DType: "U8", Shape: []uint64{1}, Length: 1}
	}
	if _, err := c.Publish(context.Background(), pub, client.ShmFill(fillBytes, false)); err != nil {
		tb.Fatalf("publish of %d tensors: %v", n, err)
	}
	return r, pub
}

// processCPU is this process's user + system CPU time in ns: what an
// attach costs in CPU on a machine shared with other work, whose wall
// times say little.
func processCPU(tb testing.TB) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// attachTimes sums the server-side attach durations the daemon reports.
type attachTimes struct {
	noMetrics
	total atomic.Int64
}

func (a *attachTimes) Attached(took time.Duration) { a.total.Add(int64(took)) }

// BenchmarkAttach is one attach (the manifest received and decoded, the
// lease released) against an in-process daemon on its Unix socket, by the
// manifest's tensor count; server-ns/op is the daemon's side of it (request
// in to manifest sent, which waits for the client to read it) and cpu-ns/op
// the CPU time of the whole process (daemon and client) per attach. The 1M case takes a while to publish; run it
// with -bench Attach/1000000.
func BenchmarkAttach(b *testing.B) {
	for _, n := range []int{16, 100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			sink := &attachTimes{}
			r, pub := publishN(b, n, sink)
			cpu0 := processCPU(b)
			b.ResetTimer()
			for b.Loop() {
				a, err := client.Attach(context.Background(), client.BySocket(r.d.Info().Paths.Socket), pub.Config, client.Options{})
				if err != nil {
					b.Fatal(err)
				}
				if len(a.Manifest.Tensors) != n {
					b.Fatalf("%d tensors, want %d", len(a.Manifest.Tensors), n)
				}
				a.Lease.Close()
			}
			b.ReportMetric(float64(sink.total.Load())/float64(b.N), "server-ns/op")
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkAttachConcurrent16 is 16 clients attaching at once to a daemon
// of 100k tensors; p50-ms and p99-ms are the wall time of one attach
// (client decoding included, all in one process).
func BenchmarkAttachConcurrent16(b *testing.B) {
	const n, clients = 100_000, 16
	r, pub := publishN(b, n, nil)
	var took []time.Duration
	var mu sync.Mutex
	b.ResetTimer()
	for b.Loop() {
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				begin := time.Now()
				a, err := client.Attach(context.Background(), client.BySocket(r.d.Info().Paths.Socket), pub.Config, client.Options{})
				if err != nil {
					b.Error(err)
					return
				}
				d := time.Since(begin)
				a.Lease.Close()
				mu.Lock()
				took = append(took, d)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	slices.Sort(took)
	if len(took) > 0 {
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
	}
}

// TestAttachFormsByRequest: over the socket, an attach that does not ask for
// a tensor table (the Python client does not) gets Manifest.tensors, one
// that does gets a TensorTable with the same tensors.
func TestAttachFormsByRequest(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, nil)
	rpc := r.rawRPC(t)
	manifest := func(table bool) *daemonv1.Manifest {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := rpc.Attach(ctx, &daemonv1.AttachRequest{Config: r.d.Info().Config.ToProto(), TensorTable: table,
			Content: &daemonv1.ContentProof{Files: cacheconfig.FilesToProto(r.d.Info().Content)}}) // the daemon's own files
		if err != nil {
			t.Fatal(err)
		}
		ev, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return ev.GetManifest()
	}
	legacy, compact := manifest(false), manifest(true)
	if legacy.GetTensorTable() != nil || len(legacy.GetTensors()) != r.d.Info().Tensors {
		t.Fatalf("attach without tensor_table: %d tensors, table %v", len(legacy.GetTensors()), legacy.GetTensorTable() != nil)
	}
	if len(compact.GetTensors()) != 0 || compact.GetTensorTable() == nil {
		t.Fatalf("attach with tensor_table: %d tensors, table %v", len(compact.GetTensors()), compact.GetTensorTable() != nil)
	}
	entries, err := compact.GetTensorTable().Decode()
	if err != nil || len(entries) != len(legacy.GetTensors()) {
		t.Fatalf("table: %d entries, %v", len(entries), err)
	}
	for i, e := range entries {
		w := legacy.GetTensors()[i]
		if e.Name != w.GetName() || e.Dtype != w.GetDtype() || !slices.Equal(e.Shape, w.GetShape()) || e.Offset != w.GetOffset() ||
			e.Length != w.GetLength() || e.HandleIndex != w.GetHandleIndex() {
			t.Fatalf("tensor %d: table %+v, tensors %v", i, e, w)
		}
	}
}
