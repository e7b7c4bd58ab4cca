package daemon

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

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
	a, b := m.forLease(1, nil).GetManifest(), m.forLease(2, nil).GetManifest()
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

// BenchmarkAttachManifest3000 is the per-attach work for a checkpoint of
// 3000 tensors: the lease's manifest message and its serialisation (what
// gRPC does on Send).
func BenchmarkAttachManifest3000(b *testing.B) {
	cfg := cacheconfig.Default()
	cfg.Model = "/m"
	m := newManifest("GPU-1", "mock", cfg.ToProto(), cfg.Digest(), 1, planOf(3000),
		[]sdk.Handle{{Kind: "cuda-ipc", Data: make([]byte, 64), Size: 3000 * 8192}})
	b.ReportAllocs()
	var id uint64
	for b.Loop() {
		id++
		if _, err := proto.Marshal(m.forLease(id, nil)); err != nil {
			b.Fatal(err)
		}
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
