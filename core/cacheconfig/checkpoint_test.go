package cacheconfig_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

var genOpts = safetensorstest.GenOptions{Layers: 2, HiddenSize: 16, VocabSize: 32, Shards: 3}

func digestDir(t *testing.T, dir string) string {
	t.Helper()
	d, err := cacheconfig.CheckpointDigestDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestCheckpointDigestFormula(t *testing.T) {
	dir := t.TempDir()
	err := safetensorstest.WriteFile(filepath.Join(dir, "model.safetensors"), []safetensorstest.Tensor{
		{Name: "w", DType: safetensors.U8, Shape: []uint64{1}, Data: []byte{1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	header := file[8 : len(file)-1]
	sum := sha256.Sum256([]byte("17:model.safetensors" + strconv.Itoa(len(header)) + ":" + string(header)))
	if got, want := digestDir(t, dir), "sha256:"+hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("digest %s, want %s", got, want)
	}
	empty := sha256.Sum256(nil)
	if got := cacheconfig.CheckpointDigest(nil); got != "sha256:"+hex.EncodeToString(empty[:]) {
		t.Fatalf("nil checkpoint digest %s", got)
	}
}

func TestCheckpointDigestStableAcrossDirectories(t *testing.T) {
	a := filepath.Join(t.TempDir(), "a")
	b := filepath.Join(t.TempDir(), "elsewhere", "b")
	if _, err := safetensorstest.GenerateCheckpoint(a, genOpts); err != nil {
		t.Fatal(err)
	}
	if _, err := safetensorstest.GenerateCheckpoint(b, genOpts); err != nil {
		t.Fatal(err)
	}
	if digestDir(t, a) != digestDir(t, b) {
		t.Fatal("the same files in two directories have different digests")
	}
}

func TestCheckpointDigestReadsNoTensorBytes(t *testing.T) {
	dir := t.TempDir()
	res, err := safetensorstest.GenerateCheckpoint(dir, genOpts)
	if err != nil {
		t.Fatal(err)
	}
	before := digestDir(t, dir)
	// Overwrite every tensor byte of every shard: the digest must not move.
	for _, path := range res.Files {
		f, file := safetensorstest.Load(t, path)
		for i := f.DataStart; i < int64(len(file)); i++ {
			file[i] ^= 0xff
		}
		if err := os.WriteFile(path, file, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if after := digestDir(t, dir); after != before {
		t.Fatalf("digest changed from %s to %s when only tensor bytes changed", before, after)
	}
}

func TestCheckpointDigestChangesWithHeaders(t *testing.T) {
	dir := t.TempDir()
	res, err := safetensorstest.GenerateCheckpoint(dir, safetensorstest.GenOptions{Layers: 1, HiddenSize: 8, VocabSize: 16, NoIndex: true})
	if err != nil {
		t.Fatal(err)
	}
	base := digestDir(t, dir)
	// A different header (metadata only) in the same file name.
	other := t.TempDir()
	if _, err := safetensorstest.GenerateCheckpoint(other, safetensorstest.GenOptions{Layers: 1, HiddenSize: 8, VocabSize: 16, NoIndex: true,
		Metadata: map[string]string{"format": "np"}}); err != nil {
		t.Fatal(err)
	}
	if digestDir(t, other) == base {
		t.Fatal("a different header gives the same digest")
	}
	// A different dtype.
	f16 := t.TempDir()
	if _, err := safetensorstest.GenerateCheckpoint(f16, safetensorstest.GenOptions{Layers: 1, HiddenSize: 8, VocabSize: 16, NoIndex: true,
		DType: safetensors.F16}); err != nil {
		t.Fatal(err)
	}
	if digestDir(t, f16) == base {
		t.Fatal("a different dtype gives the same digest")
	}
	// Same bytes, other file name.
	if err := os.Rename(res.Files[0], filepath.Join(dir, "renamed.safetensors")); err != nil {
		t.Fatal(err)
	}
	if digestDir(t, dir) == base {
		t.Fatal("renaming the file keeps the digest")
	}
}

func TestCheckpointDigestIgnoresUnindexedFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := safetensorstest.GenerateCheckpoint(dir, genOpts); err != nil {
		t.Fatal(err)
	}
	before := digestDir(t, dir)
	err := safetensorstest.WriteFile(filepath.Join(dir, "consolidated.safetensors"), []safetensorstest.Tensor{
		{Name: "w", DType: safetensors.U8, Shape: []uint64{1}, Data: []byte{1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if digestDir(t, dir) != before {
		t.Fatal("a file the index does not name changed the digest")
	}
}

func TestCheckpointDigestDirErrors(t *testing.T) {
	if _, err := cacheconfig.CheckpointDigestDir(t.TempDir()); !errors.Is(err, safetensors.ErrNoFiles) {
		t.Fatalf("err = %v, want safetensors.ErrNoFiles", err)
	}
}
