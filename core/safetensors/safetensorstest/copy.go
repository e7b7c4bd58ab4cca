package safetensorstest

import (
	"os/exec"
	"testing"
)

// CopyCheckpoint copies the checkpoint folder src to dst (which must not
// exist) as `cp -rp` does: modes and modification times kept, so that
// only the files' identity (device, inode) tells the copy from the
// original. A failure ends the test.
func CopyCheckpoint(t testing.TB, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-rp", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -rp %s %s: %v\n%s", src, dst, err, out)
	}
}
