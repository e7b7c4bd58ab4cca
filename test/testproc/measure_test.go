package testproc

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadIOCountsWhatTheProcessReads: reading a file (page cache or not)
// moves this process's RChar by at least its size, and writing one moves
// WChar.
func TestReadIOCountsWhatTheProcessReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	data := make([]byte, 1<<20)
	before, err := ReadIO(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	after, err := ReadIO(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after.RChar < before.RChar+uint64(len(data)) || after.WChar < before.WChar+uint64(len(data)) {
		t.Errorf("I/O counters %+v then %+v after writing and reading %d bytes", before, after, len(data))
	}
	if _, err := ReadIO(-1); err == nil {
		t.Error("ReadIO of pid -1: no error")
	}
}
