package sdk

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// MemfdSeals are the seals a backend puts on every memfd it exports: the
// size is fixed for every holder (none can shrink it under another's
// mapping, which would make that mapping fault with SIGBUS, nor grow it),
// and no further seal can be added (none can forbid writes to the others).
const MemfdSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// CheckMemfd verifies that f is a memfd of exactly size bytes sealed
// against shrinking (F_SEAL_SHRINK: no holder can make a mapping of it
// fault). Anything else is ErrInvalidArgument. Backends call it in Import
// of a HandleMemfd handle.
func CheckMemfd(f *os.File, size uint64) error {
	fd := int(f.Fd())
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return Errorf(ErrInvalidArgument, "descriptor is not a memfd (F_GET_SEALS: %v)", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return Errorf(ErrInvalidArgument, "memfd is not sealed against shrinking (seals %#x)", seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat memfd: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != int64(size) {
		return Errorf(ErrInvalidArgument, "memfd of %d bytes (mode %o), the handle says %d", st.Size, st.Mode, size)
	}
	return nil
}

// NewMemfd creates an anonymous memfd of size bytes named name (shown in
// /proc/PID/maps as "/memfd:NAME"; nothing is created in any folder),
// sealed with MemfdSeals. It takes no memory until written.
func NewMemfd(name string, size uint64) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), "memfd:"+name)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("size memfd %s to %d bytes: %w", name, size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, MemfdSeals); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal memfd %s: %w", name, err)
	}
	return f, nil
}

// DupFile returns a new descriptor of f's open file (close-on-exec), the
// caller's to close: what Export returns for a descriptor handle.
func DupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", f.Name(), err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
