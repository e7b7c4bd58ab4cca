package daemon

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// BenchmarkAttachContent compares attaches of a 300-tensor checkpoint in 8
// files with and without the content identity check (one stat per file,
// the files the daemon loaded): the ratio of the p50s is the check's cost
// (docs/benchmarks.md).
func BenchmarkAttachContent(b *testing.B) {
	f := newFixture(b)
	f.model = f.generate("m300", safetensorstest.GenOptions{Layers: 33, Shards: 8})
	f.fillStats = true
	r := f.start(0, nil)
	b.Logf("%d tensors in %d files", r.d.Info().Tensors, len(f.model.Files))
	c, err := client.Dial(context.Background(), client.BySocket(r.d.Info().Paths.Socket), client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	cfg := r.d.Info().Config
	for _, check := range []bool{false, true} {
		name := "attach"
		if check {
			name = "attach+identity"
		}
		b.Run(name, func(b *testing.B) {
			var ds []time.Duration
			for b.Loop() {
				t := time.Now()
				var a *client.Attachment
				if check {
					a, err = c.AttachFiles(context.Background(), cfg, f.model.Files, client.ContentOptions{NoCache: true})
				} else {
					a, err = c.Attach(context.Background(), cfg)
				}
				if err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(t))
				a.Lease.Close()
			}
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "p50-µs")
		})
	}
}
