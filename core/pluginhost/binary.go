package pluginhost

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrPluginReplaced is wrapped by every *ReplacedError.
var ErrPluginReplaced = errors.New("backend plugin binary replaced")

// BinaryID identifies the file a plugin was started from: a file replaced
// at the same path (a new inode, or new bytes written in place: new
// modification or change time, or size) has another BinaryID.
type BinaryID struct {
	Dev, Ino     uint64
	Size         int64
	Mtime, Ctime unix.Timespec
}

// binaryID reads the BinaryID of path (following symlinks, as exec does).
func binaryID(path string) (BinaryID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return BinaryID{}, fmt.Errorf("backend plugin %s: %w", path, &os.PathError{Op: "stat", Path: path, Err: err})
	}
	return BinaryID{Dev: uint64(st.Dev), Ino: st.Ino, Size: st.Size, Mtime: st.Mtim, Ctime: st.Ctim}, nil
}

// ReplacedError: Options.Binary named the file a plugin was first started
// from, and the binary found now is another one. Without a SHA-256 pin
// (Options.SHA256) that vouches for the new bytes it is not started.
type ReplacedError struct {
	Path string
}

func (e *ReplacedError) Error() string {
	return fmt.Sprintf("%s: %s is not the file the daemon started its plugin from; "+
		"pin the new binary with --plugin-sha256, or restart the daemon (serve --takeover keeps the weights)", ErrPluginReplaced, e.Path)
}

// Unwrap returns ErrPluginReplaced.
func (e *ReplacedError) Unwrap() error { return ErrPluginReplaced }
