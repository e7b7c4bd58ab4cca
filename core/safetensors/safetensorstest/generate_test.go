package safetensorstest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// checkData compares every generated tensor's bytes in its file with the
// regenerated stream.
func checkData(t *testing.T, res *safetensorstest.Result) {
	t.Helper()
	files := make(map[string]*safetensors.File)
	contents := make(map[string][]byte)
	for _, path := range res.Files {
		files[path], contents[path] = safetensorstest.Load(t, path)
	}
	for _, gt := range res.Tensors {
		f := files[gt.File]
		ti, ok := f.Tensor(gt.Name)
		if !ok || ti.DType != gt.DType || !slices.Equal(ti.Shape, gt.Shape) || ti.Len() != gt.Bytes {
			t.Fatalf("%s in %s: %+v, want %+v", gt.Name, gt.File, ti, gt)
		}
		got := contents[gt.File][f.Offset(ti) : f.Offset(ti)+int64(ti.Len())]
		if !bytes.Equal(got, gt.Data()) {
			t.Fatalf("%s: bytes differ from the regenerated stream", gt.Name)
		}
	}
}

func TestGenerateCheckpointSharded(t *testing.T) {
	dir := t.TempDir()
	res, err := safetensorstest.GenerateCheckpoint(dir, safetensorstest.GenOptions{
		Layers: 3, HiddenSize: 32, KVSize: 16, IntermediateSize: 48, VocabSize: 64, DType: safetensors.F16, Shards: 4, Seed: 7,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 4 || res.IndexPath != filepath.Join(dir, safetensors.IndexFileName) {
		t.Fatalf("files %v index %q", res.Files, res.IndexPath)
	}
	wantTensors := 1 + 3*9 + 1 + 1
	if len(res.Tensors) != wantTensors {
		t.Fatalf("%d tensors, want %d", len(res.Tensors), wantTensors)
	}
	shapes := map[string][]uint64{
		"model.embed_tokens.weight":                      {64, 32},
		"model.layers.2.self_attn.k_proj.weight":         {16, 32},
		"model.layers.0.mlp.down_proj.weight":            {32, 48},
		"model.layers.1.input_layernorm.weight":          {32},
		"model.layers.1.mlp.gate_proj.weight":            {48, 32},
		"model.layers.0.post_attention_layernorm.weight": {32},
		"lm_head.weight":                                 {64, 32},
		"model.norm.weight":                              {32},
	}
	var total uint64
	for _, gt := range res.Tensors {
		total += gt.Bytes
		if want, ok := shapes[gt.Name]; ok && !slices.Equal(gt.Shape, want) {
			t.Errorf("%s shape %v, want %v", gt.Name, gt.Shape, want)
		}
		if gt.DType != safetensors.F16 {
			t.Errorf("%s dtype %s", gt.Name, gt.DType)
		}
	}
	if total != res.TotalBytes {
		t.Fatalf("TotalBytes %d, sum %d", res.TotalBytes, total)
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.TotalBytes() != res.TotalBytes || len(ck.Files) != 4 {
		t.Fatalf("checkpoint %d bytes in %d files", ck.TotalBytes(), len(ck.Files))
	}
	for _, f := range ck.Files {
		if len(f.Header.Tensors) == 0 || f.Header.Metadata["format"] != "pt" || f.DataStart%8 != 0 {
			t.Fatalf("%s: %d tensors, metadata %v, data at %d", f.Path, len(f.Header.Tensors), f.Header.Metadata, f.DataStart)
		}
	}
	b, err := os.ReadFile(res.IndexPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Metadata  map[string]uint64 `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Metadata["total_size"] != res.TotalBytes || len(doc.WeightMap) != wantTensors {
		t.Fatalf("index %+v", doc)
	}
	checkData(t, res)

	again, err := safetensorstest.GenerateCheckpoint(t.TempDir(), safetensorstest.GenOptions{
		Layers: 3, HiddenSize: 32, KVSize: 16, IntermediateSize: 48, VocabSize: 64, DType: safetensors.F16, Shards: 4, Seed: 7,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range res.Files {
		x, _ := os.ReadFile(res.Files[i])
		y, _ := os.ReadFile(again.Files[i])
		if !bytes.Equal(x, y) {
			t.Fatalf("%s is not deterministic", filepath.Base(res.Files[i]))
		}
	}
}

func TestGenerateCheckpointSingleFile(t *testing.T) {
	dir := t.TempDir()
	res, err := safetensorstest.GenerateCheckpoint(dir, safetensorstest.GenOptions{NoIndex: true, TiedEmbeddings: true, DType: safetensors.F32})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 1 || filepath.Base(res.Files[0]) != "model.safetensors" || res.IndexPath != "" {
		t.Fatalf("files %v index %q", res.Files, res.IndexPath)
	}
	if _, ok := res.Tensor(0, "lm_head.weight"); ok {
		t.Fatal("tied embeddings wrote lm_head.weight")
	}
	if _, err := os.Stat(filepath.Join(dir, safetensors.IndexFileName)); !os.IsNotExist(err) {
		t.Fatalf("index written: %v", err)
	}
	checkData(t, res)
}

func TestGenerateCheckpointPerRank(t *testing.T) {
	dir := t.TempDir()
	res, err := safetensorstest.GenerateCheckpoint(dir, safetensorstest.GenOptions{Layers: 2, HiddenSize: 16, VocabSize: 32, TPSize: 2, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	for rank := range 2 {
		want := []string{
			filepath.Join(dir, fmt.Sprintf("model-rank-%d-part-0.safetensors", rank)),
			filepath.Join(dir, fmt.Sprintf("model-rank-%d-part-1.safetensors", rank)),
		}
		if got := res.RankFiles(rank); !slices.Equal(got, want) {
			t.Fatalf("rank %d files %v, want %v", rank, got, want)
		}
		ck, err := safetensors.OpenFiles(res.RankFiles(rank))
		if err != nil {
			t.Fatal(err)
		}
		if ck.NumTensors() != 1+2*9+2 {
			t.Fatalf("rank %d has %d tensors", rank, ck.NumTensors())
		}
	}
	if res.RankFiles(2) != nil || res.IndexPath != "" {
		t.Fatal("rank 2 or an index exists")
	}
	for name, want := range map[string][]uint64{
		"model.layers.0.self_attn.q_proj.weight": {8, 16},  // column-parallel
		"model.layers.0.self_attn.o_proj.weight": {16, 8},  // row-parallel
		"model.layers.1.mlp.down_proj.weight":    {16, 24}, // row-parallel, I = 48
		"model.embed_tokens.weight":              {16, 16}, // vocab-parallel
		"model.norm.weight":                      {16},     // replicated
	} {
		r0, ok0 := res.Tensor(0, name)
		r1, ok1 := res.Tensor(1, name)
		if !ok0 || !ok1 || !slices.Equal(r0.Shape, want) || !slices.Equal(r1.Shape, want) {
			t.Errorf("%s: %v / %v, want %v on both ranks", name, r0.Shape, r1.Shape, want)
		}
		if bytes.Equal(r0.Data(), r1.Data()) {
			t.Errorf("%s: both ranks hold the same bytes", name)
		}
	}
	checkData(t, res)
}

func TestGenerateCheckpointRefuses(t *testing.T) {
	for name, opts := range map[string]safetensorstest.GenOptions{
		"dtype":           {DType: safetensors.U8},
		"indivisible TP":  {HiddenSize: 30, TPSize: 4},
		"too many shards": {Layers: 1, Shards: 100},
		"negative":        {Layers: -1},
	} {
		if _, err := safetensorstest.GenerateCheckpoint(t.TempDir(), opts); err == nil {
			t.Errorf("%s: generated", name)
		}
	}
}

func BenchmarkGenerateCheckpoint(b *testing.B) {
	dir := b.TempDir()
	opts := safetensorstest.GenOptions{Layers: 4, HiddenSize: 512, Shards: 2}
	res, err := safetensorstest.GenerateCheckpoint(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(res.TotalBytes))
	for b.Loop() {
		if _, err := safetensorstest.GenerateCheckpoint(dir, opts); err != nil {
			b.Fatal(err)
		}
	}
}
