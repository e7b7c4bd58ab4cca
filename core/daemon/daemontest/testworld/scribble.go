package testworld

import (
	"bytes"
	"os"
	"testing"
)

// ScribbleBytes is how many bytes Scribble writes.
const ScribbleBytes = 4096

// Scribble writes ScribbleBytes of 0xa5 into the middle of the file at
// path, as any process of its owner can: a mock posix-shm arena held by a
// daemon (tensor bytes there) whose memory a test alters after it was
// loaded. It fails t when the file cannot be written.
func Scribble(t testing.TB, path string) {
	t.Helper()
	fd, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fd.WriteAt(bytes.Repeat([]byte{0xa5}, ScribbleBytes), st.Size()/2); err != nil {
		t.Fatal(err)
	}
}
