package safetensorstest

import (
	"os"
	"testing"

	"github.com/wcache/wcache/core/safetensors"
)

// Open opens the checkpoint in dir (safetensors.OpenCheckpoint); a
// failure ends the test.
func Open(t testing.TB, dir string) *safetensors.Checkpoint {
	t.Helper()
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

// Load opens the safetensors file at path (safetensors.Open) and reads all
// its bytes; a failure ends the test.
func Load(t testing.TB, path string) (*safetensors.File, []byte) {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return f, b
}
