package daemon

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/sdk"
)

// planOf makes a plan of n tensors in one arena.
func planOf(n int) *plan.Plan {
	p := &plan.Plan{Allocations: []plan.Allocation{{Bytes: uint64(n) * 8192}}}
	for i := 0; i < n; i++ {
		p.Tensors = append(p.Tensors, plan.Tensor{Name: fmt.Sprintf("model.layers.%d.mlp.weight", i), DType: "BF16",
			Shape: []uint64{64, 64}, Offset: uint64(i) * 8192, Length: 8192})
	}
	return p
}

func TestManifestForLeaseSharesTensors(t *testing.T) {
	cfg := cacheconfig.Default()
	cfg.Model = "/m"
	m := newManifest("GPU-1", "mock", cfg.ToProto(), cfg.Digest(), 7, planOf(3),
		[]sdk.Handle{{Kind: "posix-shm", Data: []byte("/dev/shm/x"), Size: 3 * 8192}})
	a, b := m.forLease(1).GetManifest(), m.forLease(2).GetManifest()
	if a.GetLeaseId() != 1 || b.GetLeaseId() != 2 || a.GetGeneration() != 7 || a.GetDeviceUuid() != "GPU-1" {
		t.Fatalf("manifests %v / %v", a, b)
	}
	if a.GetTensors()[0] != b.GetTensors()[0] {
		t.Error("leases should share the tensor messages, not copy them")
	}
	if got := a.GetTensors()[2]; got.GetName() != "model.layers.2.mlp.weight" || got.GetOffset() != 2*8192 || got.GetLength() != 8192 {
		t.Errorf("tensor 2 = %v", got)
	}
}

// flatten is what goes on the wire for a preEncoded message.
func flatten(p *preEncoded) []byte { return p.frames.Materialize() }

// TestLeaseEventIsForLeaseOnTheWire: the shared bytes plus a lease's own
// frame decode to exactly the message forLease builds, for file loads and
// for a publish's layouts and metadata.
func TestLeaseEventIsForLeaseOnTheWire(t *testing.T) {
	cfg := cacheconfig.Default()
	cfg.Model = "/m"
	m := newManifest("GPU-1", "mock", cfg.ToProto(), cfg.Digest(), 7, planOf(5),
		[]sdk.Handle{{Kind: "posix-shm", Data: []byte("/dev/shm/x"), Size: 5 * 8192}})
	m.tensors[1].Layout = &daemonv1.TensorLayout{Storage: "s", Strides: []int64{1, 64}, StorageOffset: 3}
	m.metadata = map[string]string{"quant": "fp8", "b": "2"}
	for _, id := range []uint64{0, 1, 300, 1 << 63} {
		// A table cannot carry the layout: both forms are Manifest.tensors.
		ev, err := m.leaseEvent(id, id%2 == 1)
		if err != nil {
			t.Fatal(err)
		}
		var got daemonv1.AttachEvent
		if err := proto.Unmarshal(flatten(ev), &got); err != nil {
			t.Fatalf("lease %d: %v", id, err)
		}
		if want := m.forLease(id); !proto.Equal(&got, want) {
			t.Errorf("lease %d: decoded\n%v\nwant\n%v", id, &got, want)
		}
	}
}

// TestLeaseEventTable: asked for a table, a manifest of file-loaded
// tensors goes as a TensorTable that decodes to the same tensors, and is
// much smaller (about half for these names, which differ in a layer number).
func TestLeaseEventTable(t *testing.T) {
	cfg := cacheconfig.Default()
	p := planOf(1000)
	p.Tensors[3].Shape = nil // a scalar
	p.Tensors[4].DType = "F32"
	m := newManifest("GPU-1", "mock", cfg.ToProto(), cfg.Digest(), 1, p,
		[]sdk.Handle{{Kind: "posix-shm", Data: []byte("/x"), Size: 1000 * 8192}})
	ev, err := m.leaseEvent(9, true)
	if err != nil {
		t.Fatal(err)
	}
	var got daemonv1.AttachEvent
	if err := proto.Unmarshal(flatten(ev), &got); err != nil {
		t.Fatal(err)
	}
	gm := got.GetManifest()
	if len(gm.GetTensors()) != 0 || gm.GetTensorTable() == nil || gm.GetLeaseId() != 9 {
		t.Fatalf("manifest of a table attach: %d tensors, table %v, lease %d", len(gm.GetTensors()), gm.GetTensorTable() != nil, gm.GetLeaseId())
	}
	entries, err := gm.GetTensorTable().Decode()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(m.tensors) {
		t.Fatalf("%d entries, want %d", len(entries), len(m.tensors))
	}
	for i, e := range entries {
		w := m.tensors[i]
		if e.Name != w.GetName() || e.Dtype != w.GetDtype() || !slices.Equal(e.Shape, w.GetShape()) ||
			e.HandleIndex != w.GetHandleIndex() || e.Offset != w.GetOffset() || e.Length != w.GetLength() {
			t.Fatalf("entry %d = %+v, want %v", i, e, w)
		}
	}
	legacy, _ := m.encoded(false)
	table, _ := m.encoded(true)
	if 10*len(table) >= 6*len(legacy) {
		t.Errorf("table form %d bytes, tensors form %d: want under 60%%", len(table), len(legacy))
	}
}

// TestLeaseEventDoesNotGrowWithTensors: once a generation's manifest is
// encoded, an attach of 100k tensors allocates a few frames, not a
// marshalled manifest (5 MB each before).
func TestLeaseEventDoesNotGrowWithTensors(t *testing.T) {
	cfg := cacheconfig.Default()
	m := newManifest("GPU-1", "mock", cfg.ToProto(), cfg.Digest(), 1, planOf(100_000),
		[]sdk.Handle{{Kind: "cuda-ipc", Data: make([]byte, 64), Size: 100_000 * 8192}})
	first, err := m.leaseEvent(1, true)
	if err != nil {
		t.Fatal(err)
	}
	var id uint64 = 1
	allocs := testing.AllocsPerRun(100, func() {
		id++
		ev, err := m.leaseEvent(id, true)
		if err != nil || &ev.frames[1].ReadOnlyData()[0] != &first.frames[1].ReadOnlyData()[0] {
			t.Fatalf("lease %d: %v, or the manifest bytes were not shared", id, err)
		}
	})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 20 {
		id++
		if _, err := m.leaseEvent(id, true); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if perAttach := (after.TotalAlloc - before.TotalAlloc) / 20; allocs > 8 || perAttach > 4096 {
		t.Errorf("an attach of 100k tensors allocates %.0f times, %d bytes: the manifest is re-encoded", allocs, perAttach)
	}
}

// BenchmarkLeaseEvent is the daemon's per-attach encoding work by tensor
// count (what gRPC's Send marshals). Before the manifest was encoded once
// per generation this was a full proto.Marshal: 21 ms at 100k tensors,
// 290 ms at 1M.
func BenchmarkLeaseEvent(b *testing.B) {
	for _, n := range []int{16, 100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			cfg := cacheconfig.Default()
			m := newManifest("GPU-1", "mock", cfg.ToProto(), cfg.Digest(), 1, planOf(n),
				[]sdk.Handle{{Kind: "cuda-ipc", Data: make([]byte, 64), Size: uint64(n) * 8192}})
			body, err := m.encoded(false)
			if err != nil {
				b.Fatal(err)
			}
			compact, err := m.encoded(true)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var id uint64
			for b.Loop() {
				id++
				if _, err := m.leaseEvent(id, true); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(body)), "manifest-bytes")
			b.ReportMetric(float64(len(compact)), "table-bytes")
		})
	}
}

// BenchmarkBuildManifest3000 is the one-time work at startup.
func BenchmarkBuildManifest3000(b *testing.B) {
	cfg := cacheconfig.Default()
	p := planOf(3000)
	hs := []sdk.Handle{{Kind: "cuda-ipc", Data: make([]byte, 64), Size: 3000 * 8192}}
	b.ReportAllocs()
	for b.Loop() {
		newManifest("GPU-1", "mock", cfg.ToProto(), "d", 1, p, hs)
	}
}
