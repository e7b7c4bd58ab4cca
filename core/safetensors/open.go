package safetensors

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openRegular opens path for reading only if it is a regular file, following
// symlinks (Hugging Face caches link snapshots to blobs). The type is checked
// before opening and again on the open descriptor, and the open itself is
// non-blocking: open(2) of a FIFO without a writer, or of some devices,
// blocks forever (deaf to SIGTERM in a Go program), so a FIFO named
// model.safetensors would otherwise hang whoever reads it. O_NONBLOCK is
// cleared again once the descriptor is known to be a regular file. A path
// that is not a regular file is an error naming its type.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	if st, err := os.Stat(path); err != nil {
		return nil, nil, err
	} else if !st.Mode().IsRegular() {
		return nil, nil, notRegular(path, st)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, notRegular(path, st)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: clear O_NONBLOCK: %w", path, err)
	}
	return f, st, nil
}

func notRegular(path string, st os.FileInfo) error {
	return fmt.Errorf("%s: not a regular file (%s)", path, st.Mode().Type())
}
