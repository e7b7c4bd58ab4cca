package safetensorstest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// HubSnapshot lays out the files of the checkpoint in dir as a Hugging
// Face hub cache holds a repo's snapshot, in folder repo (a
// models--org--name): blobs/<name>, snapshots/<commit>/<file> a relative
// symlink to its blob, refs/main naming commit; it returns the snapshot
// folder. A blob is named by its content's SHA-256, as the hub names
// them, except for the files misname (nil: none) says: theirs is the
// SHA-256 of other bytes, a name that lies. A failure ends the test.
func HubSnapshot(t testing.TB, repo, commit, dir string, misname func(file string) bool) string {
	t.Helper()
	snap := filepath.Join(repo, "snapshots", commit)
	for _, d := range []string{filepath.Join(repo, "blobs"), filepath.Join(repo, "refs"), snap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if misname != nil && misname(e.Name()) {
			sum = sha256.Sum256(append(b, 0))
		}
		blob := hex.EncodeToString(sum[:])
		if err := os.WriteFile(filepath.Join(repo, "blobs", blob), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return snap
}
