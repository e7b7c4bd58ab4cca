// Package pathstest gives tests a folder short enough for Unix sockets: a
// socket path holds at most 107 bytes (sun_path), and t.TempDir() names,
// which embed the test's name, can be longer; and the things found where
// a daemon's socket should be that are not a live daemon (DeadSocket,
// NotSockets); and new files of a given mode written from a stream or
// copied (WriteNew, CopyFile). It imports nothing of the module, so that
// any package's tests, core/paths' own included, use it.
package pathstest

import (
	"io"
	"net"
	"os"
	"path/filepath"
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

// DeadSocket leaves a Unix socket file at path with nobody listening (a
// connect is refused), as a daemon that crashed does.
func DeadSocket(t testing.TB, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
}

// NotSockets makes in dir a regular file and a symlink to socket, and
// returns their paths: neither may pass for a daemon's socket.
func NotSockets(t testing.TB, dir, socket string) (regular, link string) {
	t.Helper()
	regular = filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link = filepath.Join(dir, "link")
	if err := os.Symlink(socket, link); err != nil {
		t.Fatal(err)
	}
	return regular, link
}

// WriteNew creates the file path, which must not exist, with mode and
// writes what r holds into it. A failure ends the test.
func WriteNew(t testing.TB, path string, mode os.FileMode, r io.Reader) {
	t.Helper()
	w, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Close()
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// CopyFile copies the file src to dst, which must not exist, with mode
// (WriteNew). A failure ends the test.
func CopyFile(t testing.TB, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	WriteNew(t, dst, mode, in)
}
