package sdk

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/internal/mmap"
)

// MemfdSeals are the seals a backend puts on every memfd it creates
// (NewMemfd does): the size is fixed for every holder (none can shrink it
// under another's mapping, which would make that mapping fault with
// SIGBUS, nor grow it). F_SEAL_SEAL is not among them: once the memory is
// filled the daemon adds F_SEAL_WRITE, F_SEAL_FUTURE_WRITE and F_SEAL_SEAL
// itself, before any client may attach, so a backend never seals against
// writes.
const MemfdSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// CheckMemfd verifies that f is a memfd of exactly size bytes sealed
// against shrinking (F_SEAL_SHRINK: no holder can make a mapping of it
// fault). Anything else is ErrInvalidArgument. Backends call it in Import
// of a names.KindMemfd handle.
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
// sealed with MemfdSeals, of mode 0400 (another uid that gets a descriptor
// cannot reopen it writable through /proc/PID/fd; root can, which is what
// the daemon's write seals are for). It takes no memory until written.
// Fill it through the descriptor (pwrite) or a shared mapping that is
// unmapped before the daemon seals it against writes (a writable shared
// mapping still open then fails the seal); map it for reading with
// MapMemfdReadOnly.
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
	if err := unix.Fchmod(fd, 0o400); err != nil {
		f.Close()
		return nil, fmt.Errorf("chmod memfd %s: %w", name, err)
	}
	return f, nil
}

// MapMemfdReadOnly maps size bytes of the memfd fd for reading, privately
// (MAP_PRIVATE, PROT_READ): the mapping sees every write made through the
// descriptor, and unlike a shared mapping of a writable descriptor it does
// not keep the daemon from adding F_SEAL_WRITE. What a backend keeps mapped
// to Read or Digest its memfds.
func MapMemfdReadOnly(fd int, size uint64) ([]byte, error) {
	if size == 0 || size > math.MaxInt {
		return nil, Errorf(ErrInvalidArgument, "map a memfd of %d bytes", size)
	}
	return mmap.FD(fd, size, mmap.ReadPrivate)
}
