package tensorview

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"testing"
)

// torchVocabPath holds the torch dtype vocabulary (name → bits per element)
// for the Python client's tests: wcache/dtypes.py keeps its own copy of
// torchBits, and clients/python/tests/test_vectors.py checks it against this
// file, so the two cannot drift apart unnoticed.
var torchVocabPath = filepath.Join("testdata", "torch_dtypes.json")

// updateVocabEnv rewrites torchVocabPath from torchBits when set to 1 (the
// variable the cacheconfig vectors use).
const updateVocabEnv = "WCACHE_UPDATE_VECTORS"

func TestTorchVocabularyFile(t *testing.T) {
	if os.Getenv(updateVocabEnv) == "1" {
		data, err := json.MarshalIndent(torchBits, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(torchVocabPath, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(torchVocabPath)
	if err != nil {
		t.Fatalf("%v; regenerate with %s=1 go test ./core/tensorview/ -run TestTorchVocabularyFile", err, updateVocabEnv)
	}
	var file map[string]uint64
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatalf("%s: %v", torchVocabPath, err)
	}
	if !maps.Equal(file, torchBits) {
		t.Fatalf("%s differs from torchBits; regenerate with %s=1 go test ./core/tensorview/ -run TestTorchVocabularyFile", torchVocabPath, updateVocabEnv)
	}
}
