// Package pathstest gives tests a folder short enough for Unix sockets: a
// socket path holds at most 107 bytes (sun_path), and t.TempDir() names,
// which embed the test's name, can be longer. It imports nothing of the
// module, so that any package's tests, core/paths' own included, use it.
package pathstest

import (
	"os"
	"testing"
)

// ShortDir makes a private folder (0700) directly under the system's
// temporary folder and registers its removal when the test ends. Failures
// end the test.
func ShortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wct")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
