package safetensors_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// generate writes a small sharded checkpoint.
func generate(t *testing.T, opts safetensorstest.GenOptions) (string, *safetensorstest.Result) {
	t.Helper()
	dir := t.TempDir()
	if opts.HiddenSize == 0 {
		opts.HiddenSize = 16
	}
	if opts.VocabSize == 0 {
		opts.VocabSize = 32
	}
	res, err := safetensorstest.GenerateCheckpoint(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return dir, res
}

// writeJSON replaces path with v encoded as JSON.
func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// indexDoc reads the generated index.
func indexDoc(t *testing.T, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, safetensors.IndexFileName))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func basenames(files []*safetensors.File) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = filepath.Base(f.Path)
	}
	return out
}

func TestOpenCheckpointIndexed(t *testing.T) {
	dir, res := generate(t, safetensorstest.GenOptions{Layers: 3, Shards: 3})
	// A stray file the index does not name, holding a clashing tensor name,
	// must be ignored.
	err := safetensorstest.WriteFile(filepath.Join(dir, "stray.safetensors"), []safetensorstest.Tensor{
		{Name: "lm_head.weight", DType: safetensors.U8, Shape: []uint64{1}, Data: []byte{0}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}
	if got := basenames(ck.Files); !slices.Equal(got, want) {
		t.Fatalf("files = %v, want %v", got, want)
	}
	if ck.Dir != dir || ck.Index == nil || len(ck.Index.WeightMap) != len(res.Tensors) {
		t.Fatalf("checkpoint = %+v", ck)
	}
	if ck.NumTensors() != len(res.Tensors) || ck.TotalBytes() != res.TotalBytes {
		t.Fatalf("%d tensors / %d bytes, want %d / %d", ck.NumTensors(), ck.TotalBytes(), len(res.Tensors), res.TotalBytes)
	}
}

func TestOpenCheckpointWithoutIndex(t *testing.T) {
	dir, res := generate(t, safetensorstest.GenOptions{Shards: 2, NoIndex: true})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Index != nil || len(ck.Files) != 2 || ck.NumTensors() != len(res.Tensors) {
		t.Fatalf("checkpoint = %+v", ck)
	}
	// Without an index every *.safetensors counts, so a second file with a
	// tensor of the same name is a duplicate.
	err = safetensorstest.WriteFile(filepath.Join(dir, "extra.safetensors"), []safetensorstest.Tensor{
		{Name: "model.norm.weight", DType: safetensors.U8, Shape: []uint64{1}, Data: []byte{0}},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = safetensors.OpenCheckpoint(dir)
	var fe *safetensors.FormatError
	if !errors.Is(err, safetensors.ErrDuplicateName) || !errors.As(err, &fe) || fe.Tensor != "model.norm.weight" {
		t.Fatalf("err = %v, want ErrDuplicateName for model.norm.weight", err)
	}
}

func TestOpenCheckpointIndexViolations(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(wm map[string]any)
		want   error
	}{
		{"weight missing from its shard", func(wm map[string]any) { wm["model.ghost.weight"] = "model-00001-of-00002.safetensors" }, safetensors.ErrMissingTensor},
		{"weight mapped to the other shard", func(wm map[string]any) { wm["model.embed_tokens.weight"] = "model-00002-of-00002.safetensors" }, safetensors.ErrMisplacedTensor},
		{"shard path with a parent", func(wm map[string]any) { wm["lm_head.weight"] = "../model-00002-of-00002.safetensors" }, safetensors.ErrInvalidIndex},
		{"shard path with a directory", func(wm map[string]any) { wm["lm_head.weight"] = "sub/x.safetensors" }, safetensors.ErrInvalidIndex},
		{"absolute shard path", func(wm map[string]any) { wm["lm_head.weight"] = "/etc/passwd" }, safetensors.ErrInvalidIndex},
		{"shard dot-dot", func(wm map[string]any) { wm["lm_head.weight"] = ".." }, safetensors.ErrInvalidIndex},
		{"shard not a string", func(wm map[string]any) { wm["lm_head.weight"] = 3 }, safetensors.ErrInvalidIndex},
		{"shard file absent", func(wm map[string]any) { wm["lm_head.weight"] = "absent.safetensors" }, fs.ErrNotExist},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := generate(t, safetensorstest.GenOptions{Shards: 2})
			doc := indexDoc(t, dir)
			tc.mutate(doc["weight_map"].(map[string]any))
			writeJSON(t, filepath.Join(dir, safetensors.IndexFileName), doc)
			_, err := safetensors.OpenCheckpoint(dir)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestOpenCheckpointIndexSyntax(t *testing.T) {
	cases := []struct {
		name, index string
		want        error
	}{
		{"duplicate weight", `{"weight_map":{"a":"x.safetensors","a":"x.safetensors"}}`, safetensors.ErrDuplicateName},
		{"duplicate weight_map", `{"weight_map":{},"weight_map":{}}`, safetensors.ErrDuplicateName},
		{"no weight_map", `{"metadata":{}}`, safetensors.ErrInvalidIndex},
		{"weight_map not object", `{"weight_map":[]}`, safetensors.ErrInvalidIndex},
		{"not an object", `[]`, safetensors.ErrInvalidIndex},
		{"trailing data", `{"weight_map":{}} {}`, safetensors.ErrInvalidIndex},
		{"invalid UTF-8", "{\"weight_map\":{\"\xff\":\"x\"}}", safetensors.ErrInvalidIndex},
		{"empty weight_map", `{"weight_map":{}}`, safetensors.ErrNoFiles},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, safetensors.IndexFileName)
			if err := os.WriteFile(path, []byte(tc.index), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := safetensors.OpenCheckpoint(dir)
			var fe *safetensors.FormatError
			if !errors.Is(err, tc.want) || !errors.As(err, &fe) || fe.Path != path {
				t.Fatalf("err = %v, want %v for %s", err, tc.want, path)
			}
		})
	}
}

func TestParseIndexKeepsMetadata(t *testing.T) {
	ix, err := safetensors.ParseIndex([]byte(`{"metadata":{"total_size":12},"other":[1,{"a":2}],"weight_map":{"b":"y.safetensors","a":"x.safetensors","c":"x.safetensors"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(ix.Metadata) != `{"total_size":12}` || ix.WeightMap["b"] != "y.safetensors" {
		t.Fatalf("index = %+v", ix)
	}
	if got := ix.Shards(); !slices.Equal(got, []string{"x.safetensors", "y.safetensors"}) {
		t.Fatalf("Shards() = %v", got)
	}
}

func TestOpenCheckpointBadShard(t *testing.T) {
	dir, _ := generate(t, safetensorstest.GenOptions{Shards: 2})
	path := filepath.Join(dir, "model-00002-of-00002.safetensors")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("trailing")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = safetensors.OpenCheckpoint(dir)
	var fe *safetensors.FormatError
	if !errors.Is(err, safetensors.ErrIncompleteBuffer) || !errors.As(err, &fe) || fe.Path != path {
		t.Fatalf("err = %v, want ErrIncompleteBuffer for %s", err, path)
	}
}

func TestOpenCheckpointEmpty(t *testing.T) {
	dir := t.TempDir()
	if _, err := safetensors.OpenCheckpoint(dir); !errors.Is(err, safetensors.ErrNoFiles) {
		t.Fatalf("err = %v, want ErrNoFiles", err)
	}
	if _, err := safetensors.OpenCheckpoint(filepath.Join(dir, "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
}

func TestOpenFiles(t *testing.T) {
	dir, res := generate(t, safetensorstest.GenOptions{TPSize: 2, Shards: 2})
	rank1 := res.RankFiles(1)
	want := []string{"model-rank-1-part-0.safetensors", "model-rank-1-part-1.safetensors"}
	ck, err := safetensors.OpenFiles([]string{rank1[1], rank1[0]})
	if err != nil {
		t.Fatal(err)
	}
	if got := basenames(ck.Files); !slices.Equal(got, want) || ck.Dir != dir || ck.Index != nil {
		t.Fatalf("files %v dir %q, want %v in %s", got, ck.Dir, want, dir)
	}
	// Both ranks together hold every tensor name twice.
	if _, err := safetensors.OpenFiles(res.Files); !errors.Is(err, safetensors.ErrDuplicateName) {
		t.Fatalf("err = %v, want ErrDuplicateName", err)
	}
	if _, err := safetensors.OpenFiles(nil); !errors.Is(err, safetensors.ErrNoFiles) {
		t.Fatalf("err = %v, want ErrNoFiles", err)
	}
	other := t.TempDir()
	copyPath := filepath.Join(other, filepath.Base(rank1[0]))
	b, err := os.ReadFile(rank1[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := safetensors.OpenFiles([]string{rank1[0], copyPath}); !errors.Is(err, safetensors.ErrDuplicateFile) {
		t.Fatalf("err = %v, want ErrDuplicateFile", err)
	}
	// Files from two directories: no common Dir.
	rank0 := res.RankFiles(0)
	moved := filepath.Join(other, "elsewhere.safetensors")
	if err := os.Rename(rank0[0], moved); err != nil {
		t.Fatal(err)
	}
	ck, err = safetensors.OpenFiles([]string{moved, rank0[1]})
	if err != nil {
		t.Fatal(err)
	}
	if ck.Dir != "" {
		t.Fatalf("Dir = %q, want empty for files in two directories", ck.Dir)
	}
}
