package daemon

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"github.com/wcache/wcache/core/paths"
)

// ListenUnix listens on a Unix socket at path whose file is mode 0600 (or,
// with a non-nil gid, 0660 and group-owned by *gid) from the moment it is
// visible. The socket is bound inside a fresh 0700
// directory next to path, chmod-ed to 0600 there, then renamed into place,
// so that no process-wide umask change is needed and no other user can
// connect during a window in which the file has a wider mode. The daemon
// listens on its device socket with it; other listeners of the daemon's
// process (the metrics endpoint) reuse it.
//
// The caller must own path (the daemon holds the device's identity lock):
// an existing socket file at path is taken as stale and replaced; any other
// kind of file at path is refused rather than clobbered. The directory of
// path must exist and be writable. The returned listener does not unlink
// the path on Close: the caller removes it when done.
func ListenUnix(path string, gid *uint32) (*net.UnixListener, error) {
	return listenUnix("unix", path, gid)
}

// listenUnix is ListenUnix for network "unix" (stream) or "unixpacket"
// (SOCK_SEQPACKET: the descriptor channel).
func listenUnix(network, path string, gid *uint32) (*net.UnixListener, error) {
	if err := paths.CheckSocketPath(path); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("socket path %s exists and is not a socket (%s); refusing to replace it", path, fi.Mode().Type())
	}
	tmpDir, err := os.MkdirTemp(filepath.Dir(path), ".wcb")
	if err != nil {
		return nil, fmt.Errorf("listen on %s: private bind directory: %w", path, err)
	}
	defer os.Remove(tmpDir)
	tmp := filepath.Join(tmpDir, "s")
	if err := paths.CheckSocketPath(tmp); err != nil {
		return nil, fmt.Errorf("listen on %s: temporary bind path: %w", path, err)
	}
	l, err := net.ListenUnix(network, &net.UnixAddr{Name: tmp, Net: network})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false)
	fail := func(err error) (*net.UnixListener, error) {
		l.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	mode := os.FileMode(0o600)
	if gid != nil {
		if err := os.Chown(tmp, -1, int(*gid)); err != nil {
			return fail(fmt.Errorf("socket group %d: %w", *gid, err))
		}
		mode = 0o660
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	return l, nil
}
