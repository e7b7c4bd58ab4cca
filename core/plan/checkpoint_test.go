package plan_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

func TestOpenCheckpointWholeOrRankFiles(t *testing.T) {
	whole := t.TempDir()
	gen, err := safetensorstest.GenerateCheckpoint(whole, safetensorstest.GenOptions{Layers: 1, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	ck, err := plan.OpenCheckpoint(whole, "", plan.ShardRanks{TPRank: 1, TPSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if ck.NumTensors() != len(gen.Tensors) || len(ck.Files) != 2 {
		t.Fatalf("whole checkpoint: %d tensors in %d files, want %d in 2", ck.NumTensors(), len(ck.Files), len(gen.Tensors))
	}

	sharded := t.TempDir()
	gen, err = safetensorstest.GenerateCheckpoint(sharded, safetensorstest.GenOptions{Layers: 1, Shards: 2, TPSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	ck, err = plan.OpenCheckpoint(sharded, "model-rank-{tp_rank}-part-*.safetensors", plan.ShardRanks{TPRank: 1, TPSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := gen.RankFiles(1)
	if len(ck.Files) != len(want) {
		t.Fatalf("rank 1: %d files, want %v", len(ck.Files), want)
	}
	for i, f := range ck.Files {
		if f.Path != want[i] {
			t.Fatalf("rank 1 file %d is %s, want %s", i, f.Path, want[i])
		}
	}
}

func TestOpenCheckpointErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := plan.OpenCheckpoint(dir, "model-{nope}.safetensors", plan.ShardRanks{TPSize: 1}); !errors.Is(err, plan.ErrInvalidPattern) {
		t.Errorf("bad pattern: %v, want ErrInvalidPattern", err)
	}
	if _, err := plan.OpenCheckpoint(dir, "model-rank-{tp_rank}.safetensors", plan.ShardRanks{TPSize: 1}); !errors.Is(err, plan.ErrNoShards) {
		t.Errorf("no files: %v, want ErrNoShards", err)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := plan.OpenCheckpoint(missing, "", plan.ShardRanks{}); err == nil {
		t.Error("a missing directory opened")
	}
}
