package daemon

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
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
	d, err := Start(context.Background(), p, o)
	if err != nil {
		tb.Fatalf("start: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{d: d, p: p, cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = d.Run(ctx)
		close(r.done)
	}()
	tb.Cleanup(func() { cancel(); <-r.done })
	c, err := client.Dial(context.Background(), client.BySocket(d.Info().Paths.Socket), client.Options{})
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

// attachTimes sums the server-side attach durations the daemon reports.
type attachTimes struct {
	noMetrics
	total atomic.Int64
}

func (a *attachTimes) Attached(took time.Duration) { a.total.Add(int64(took)) }

// BenchmarkAttach is one attach (the manifest received and decoded, the
// lease released) against an in-process daemon on its Unix socket, by the
// manifest's tensor count; server-ns/op is the daemon's side of it (request
// in to manifest sent, which waits for the client to read it). The 1M case takes a while to publish; run it
// with -bench Attach/1000000.
func BenchmarkAttach(b *testing.B) {
	for _, n := range []int{16, 100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			sink := &attachTimes{}
			r, pub := publishN(b, n, sink)
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
