package backendtest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/wcache/wcache/internal/childproc"
)

// The file-backed mock (sdk/mock, with posix-shm handles) keeps each
// allocation in a file <pid>-<instance>-<id>.shm of its folder. What
// follows is shared by the tests of the mock, of its plugin
// (plugins/mock) and of the daemons and binaries that run over it.

// ShmFiles lists the mock's allocation files in dir.
func ShmFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.shm"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// CheckRemovesStaleShmFiles writes into dir an allocation file of a
// process that has ended, one of this process, one of its parent and a
// file that is no allocation's; then calls open, which starts a mock over
// dir, and fails t unless the first file is gone and the others are kept.
func CheckRemovesStaleShmFiles(t *testing.T, dir string, open func()) {
	t.Helper()
	name := func(pid int) string { return filepath.Join(dir, strconv.Itoa(pid)+"-0123456789abcdef-1.shm") }
	dead := name(childproc.ExitedPID(t))
	keep := []string{name(os.Getpid()), name(os.Getppid()), filepath.Join(dir, "notes.txt")}
	for _, p := range append([]string{dead}, keep...) {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	open()
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s, the file of a process that has ended, is still there: %v", dead, err)
	}
	for _, p := range keep {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}
