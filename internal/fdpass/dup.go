package fdpass

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Dup returns a new descriptor of f's open file (close-on-exec), the
// caller's to close: the daemon hands each receiver its own copy of a
// handle's descriptor.
func Dup(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", f.Name(), err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
