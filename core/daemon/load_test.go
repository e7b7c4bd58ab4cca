package daemon

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
)

// TestArenasLoadTogether plans one arena per checkpoint file and delays
// every Load: loaded one after another they would take the delay per
// arena; together they take it about once. Progress still sums to the
// checkpoint and the fill counters arrive summed.
func TestArenasLoadTogether(t *testing.T) {
	const delay = 400 * time.Millisecond
	f := newFixture(t)
	p := f.plugin(func(b *mock.Backend) {
		load := b.LoadFunc
		b.LoadFunc = nil
		b.LoadStatsFunc = func(ctx context.Context, id sdk.AllocationID, ext []sdk.Extent, progress sdk.ProgressFunc) (sdk.LoadStats, error) {
			time.Sleep(delay)
			if err := load(ctx, id, ext, progress); err != nil {
				return sdk.LoadStats{}, err
			}
			var n uint64
			for _, e := range ext {
				n += e.Length
			}
			return sdk.LoadStats{Bytes: n, Chunks: uint64(len(ext))}, nil
		}
	})
	o := f.options(0)
	var biggest uint64
	for _, path := range f.model.Files {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		biggest = max(biggest, uint64(fi.Size()))
	}
	o.Plan = plan.Options{MaxArenaBytes: (biggest + 4095) / 4096 * 4096}
	var last uint64
	o.Progress = func(done, total uint64) {
		if done < last || done > total {
			t.Errorf("progress %d of %d after %d", done, total, last)
		}
		last = done
	}
	d, err := Start(context.Background(), p, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = d.Stop(context.Background(), true, time.Second)
	})
	info := d.Info()
	if info.Load.Allocations < 2 {
		t.Fatalf("plan made %d arenas; the test needs several", info.Load.Allocations)
	}
	if limit := time.Duration(info.Load.Allocations)*delay - delay/2; info.Load.Duration >= limit {
		t.Errorf("%d arenas with a %v Load delay took %v: loaded one after another", info.Load.Allocations, delay, info.Load.Duration)
	}
	if last != f.model.TotalBytes || info.Load.Fill.Bytes != f.model.TotalBytes || info.Load.Fill.Chunks == 0 {
		t.Errorf("progress ended at %d, fill counters %+v; checkpoint %d bytes", last, info.Load.Fill, f.model.TotalBytes)
	}
}
