package plan

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func touch(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestShardFilesExpandsRanksAndSortsNaturally(t *testing.T) {
	dir := t.TempDir()
	touch(t, dir,
		"model-rank-1-part-0.safetensors", "model-rank-1-part-10.safetensors", "model-rank-1-part-2.safetensors",
		"model-rank-10-part-0.safetensors", "model-rank-0-part-0.safetensors", "config.json")
	got, err := ShardFiles(dir, "model-rank-{tp_rank}-part-*.safetensors", ShardRanks{TPRank: 1, TPSize: 11, PPSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(dir, "model-rank-1-part-0.safetensors"),
		filepath.Join(dir, "model-rank-1-part-2.safetensors"),
		filepath.Join(dir, "model-rank-1-part-10.safetensors"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestShardFilesPipelineRank(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "pp1"), 0o755); err != nil {
		t.Fatal(err)
	}
	touch(t, dir, "pp1/tp0.safetensors", "pp1/tp1.safetensors")
	got, err := ShardFiles(dir, "pp{pp_rank}/tp{tp_rank}.safetensors", ShardRanks{TPRank: 1, TPSize: 2, PPRank: 1, PPSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, "pp1/tp1.safetensors")}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestShardFilesErrors(t *testing.T) {
	dir := t.TempDir()
	touch(t, dir, "model-rank-0-part-0.safetensors")
	for _, c := range []struct {
		pattern string
		ranks   ShardRanks
		want    error
	}{
		{"model-rank-{tp_rank}-part-*.safetensors", ShardRanks{TPRank: 3, TPSize: 4}, ErrNoShards},
		{"model-part-*.safetensors", ShardRanks{TPSize: 2}, ErrInvalidPattern},
		{"model-rank-{tp_rank}.safetensors", ShardRanks{TPSize: 1, PPSize: 2}, ErrInvalidPattern},
		{"model-{rank}-*.safetensors", ShardRanks{}, ErrInvalidPattern},
		{"../other/*.safetensors", ShardRanks{}, ErrInvalidPattern},
		{"/etc/*.safetensors", ShardRanks{}, ErrInvalidPattern},
		{"", ShardRanks{}, ErrInvalidPattern},
		{"model-[.safetensors", ShardRanks{}, ErrInvalidPattern},
	} {
		if _, err := ShardFiles(dir, c.pattern, c.ranks); !errors.Is(err, c.want) {
			t.Errorf("%q %+v: err = %v, want %v", c.pattern, c.ranks, err, c.want)
		}
	}
}

func TestNaturalLess(t *testing.T) {
	in := []string{"a10", "a2", "a02", "b", "a1x", "a", "a1"}
	slices.SortFunc(in, func(x, y string) int {
		switch {
		case naturalLess(x, y):
			return -1
		case naturalLess(y, x):
			return 1
		}
		return 0
	})
	want := []string{"a", "a1", "a1x", "a2", "a02", "a10", "b"}
	if !slices.Equal(in, want) {
		t.Errorf("got %q, want %q", in, want)
	}
}

func TestShardFilesSkipsHiddenFiles(t *testing.T) {
	dir := t.TempDir()
	touch(t, dir, "a-0.safetensors", ".a-0.safetensors", ".x.safetensors")
	got, err := ShardFiles(dir, "*.safetensors", ShardRanks{TPSize: 1, PPSize: 1})
	if err != nil || !slices.Equal(got, []string{filepath.Join(dir, "a-0.safetensors")}) {
		t.Fatalf("ShardFiles = %q, %v; want only the visible file", got, err)
	}
	if _, err := ShardFiles(dir, ".x*", ShardRanks{TPSize: 1, PPSize: 1}); !errors.Is(err, ErrNoShards) {
		t.Fatalf("a pattern matching only hidden files: %v, want ErrNoShards", err)
	}
}
