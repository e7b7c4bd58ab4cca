package safetensors_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// benchFile builds an in-memory file of n small BF16 tensors with
// llama-like names.
func benchFile(b *testing.B, n int) []byte {
	tensors := make([]safetensorstest.Tensor, n)
	for i := range tensors {
		tensors[i] = safetensorstest.Tensor{
			Name:  fmt.Sprintf("model.layers.%d.mlp.experts.%d.down_proj.weight", i/64, i%64),
			DType: safetensors.BF16, Shape: []uint64{8, 4}, Data: make([]byte, 64),
		}
	}
	var buf bytes.Buffer
	if err := safetensorstest.Encode(&buf, tensors, map[string]string{"format": "pt"}); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

func BenchmarkParseHeader(b *testing.B) {
	for _, n := range []int{300, 3000} {
		b.Run(fmt.Sprintf("tensors=%d", n), func(b *testing.B) {
			file := benchFile(b, n)
			r := bytes.NewReader(file)
			h, _, err := safetensors.ParseHeader(r, int64(len(file)))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(h.Size))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := safetensors.ParseHeader(r, int64(len(file))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
