package safetensorstest

import (
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
