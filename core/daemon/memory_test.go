package daemon

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
)

// countAllocations makes b count its Allocate calls in n, and reserve
// each allocation rounded up to roundTo bytes (as a backend with an
// allocation granularity does).
func countAllocations(n *atomic.Int64, roundTo uint64) func(*mock.Backend) {
	return func(b *mock.Backend) {
		orig := b.AllocateFunc
		b.AllocateFunc = func(ctx context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
			n.Add(1)
			return orig(ctx, ordinal, (bytes+roundTo-1)/roundTo*roundTo)
		}
	}
}

// TestMemoryRefusedBeforeAllocating: a load past MaxBytes, or past the
// device's free memory less ReserveBytes, fails Start with a *MemoryError
// naming the numbers, and the backend saw no Allocate.
func TestMemoryRefusedBeforeAllocating(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want func(*MemoryError) bool
	}{
		{"max-bytes", func(o *Options) { o.MaxBytes = 4096 },
			func(e *MemoryError) bool { return e.MaxBytes == 4096 && e.Need > 4096 }},
		{"max-fraction", func(o *Options) { o.MaxFraction = 1e-6 }, // of the mock's 1 GiB
			func(e *MemoryError) bool { return e.MaxBytes == 1073 && e.Need > e.MaxBytes }},
		{"reserve-bytes", func(o *Options) { o.ReserveBytes = 1 << 30 },
			func(e *MemoryError) bool { return e.Free == 1<<30 && e.Reserve == 1<<30 && e.Need > 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var allocs atomic.Int64
			o := f.options(0)
			tc.edit(&o)
			_, err := Start(context.Background(), f.plugin(countAllocations(&allocs, 1)), o)
			me, ok := errors.AsType[*MemoryError](err)
			if !ok || !tc.want(me) {
				t.Fatalf("Start: %v, want a *MemoryError with the numbers", err)
			}
			if n := allocs.Load(); n != 0 {
				t.Fatalf("a refused load called Allocate %d times", n)
			}
		})
	}
}

// TestDeviceBytesAreTheBackendsSizes: what the daemon reports as held is
// what the backend reserved (here rounded up to 1 MiB per arena), not the
// plan's sizes nor the tensor bytes; a cap of exactly the plan admits it.
func TestDeviceBytesAreTheBackendsSizes(t *testing.T) {
	f := newFixture(t)
	var allocs atomic.Int64
	p := f.plugin(countAllocations(&allocs, 1<<20))
	o := f.options(0)
	o.MaxBytes = 1 << 30
	r := f.run(p, o)
	n := uint64(allocs.Load())
	st := r.d.statusProto()
	if n == 0 || st.GetDeviceBytes() != n<<20 || st.GetDeviceBytesTotal() != n<<20 || st.GetMaxBytes() != 1<<30 {
		t.Fatalf("status device_bytes %d, total %d, max %d; the backend reserved %d arenas of 1 MiB",
			st.GetDeviceBytes(), st.GetDeviceBytesTotal(), st.GetMaxBytes(), n)
	}
}
