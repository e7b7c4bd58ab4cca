package client

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// manifestWire is the wire form of a manifest of n tensors in a tensor
// table, as a daemon sends it to a client that asked for the table, with
// the names a decoder-only model's checkpoint has.
func manifestWire(tb testing.TB, n int) []byte {
	tb.Helper()
	parts := []string{"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
		"self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
		"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}
	tensors := make([]*daemonv1.Tensor, n)
	var off uint64
	for i := range tensors {
		shape := []uint64{4096, uint64(64 + i%7)}
		length := 2 * shape[0] * shape[1]
		tensors[i] = &daemonv1.Tensor{Name: fmt.Sprintf("model.layers.%d.%s", i/len(parts), parts[i%len(parts)]),
			Dtype: "BF16", Shape: shape, Offset: off, Length: length}
		off += length
	}
	table, ok := daemonv1.NewTensorTable(tensors)
	if !ok {
		tb.Fatal("NewTensorTable refused tensors without a layout")
	}
	b, err := proto.Marshal(&daemonv1.AttachEvent{Event: &daemonv1.AttachEvent_Manifest{Manifest: &daemonv1.Manifest{
		DeviceUuid: "GPU-bench", Backend: "mock", Handles: []*daemonv1.Handle{{Kind: "posix-shm", Size: off}},
		TensorTable: table}}})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkManifestFromWire: what a client's attach spends on the manifest
// it receives, from the message's bytes to the Manifest it returns.
func BenchmarkManifestFromWire(b *testing.B) {
	for _, n := range []int{300, 100_000} {
		wire := manifestWire(b, n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(wire)))
			for b.Loop() {
				var ev daemonv1.AttachEvent
				if err := proto.Unmarshal(wire, &ev); err != nil {
					b.Fatal(err)
				}
				m, err := manifestFromProto(ev.GetManifest())
				if err != nil {
					b.Fatal(err)
				}
				if len(m.Tensors) != n {
					b.Fatalf("%d tensors, want %d", len(m.Tensors), n)
				}
			}
		})
	}
}
