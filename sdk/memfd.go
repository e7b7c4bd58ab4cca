package sdk

import (
	"errors"
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/internal/mmap"
)

// MemfdSeals are the seals a backend puts on every memfd it creates: the
// size is fixed for every holder (none can shrink it under another's
// mapping, which would make that mapping fault with SIGBUS, nor grow it).
// F_SEAL_SEAL is not among them: the daemon adds F_SEAL_WRITE,
// F_SEAL_FUTURE_WRITE and F_SEAL_SEAL once the memory is filled
// (SealMemfd), and the seals after those.
const MemfdSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// memfdServeSeals are the seals the daemon adds (SealMemfd) before any
// client may attach to a memfd: from then on nobody — root included, and
// whatever file description it holds or reopens through /proc — can
// write(2) to it, map it shared and writable, punch holes in it, or add or
// remove a seal. F_SEAL_WRITE also proves that no writable shared mapping
// remained (it cannot be added while one exists), so a publisher's write
// access ends with its commit. Private (copy-on-write) mappings stay
// allowed: a client's writes to its view then stay its own.
const memfdServeSeals = unix.F_SEAL_WRITE | unix.F_SEAL_FUTURE_WRITE | unix.F_SEAL_SEAL

// ErrWritableMapping is returned by SealMemfd when a writable shared
// mapping of the memfd still exists (in any process) and F_SEAL_WRITE
// cannot be added (EBUSY).
var ErrWritableMapping = errors.New("a writable shared mapping of the memory is still open")

// SealMemfd adds the serve seals (F_SEAL_WRITE, F_SEAL_FUTURE_WRITE,
// F_SEAL_SEAL: memfdServeSeals) to the memfd f: after it returns nil, the
// memory is read-only for every holder. A memfd that carries them already
// is left as it is (nil). A writable shared mapping still open anywhere is
// ErrWritableMapping (nothing is sealed); a memfd sealed with F_SEAL_SEAL
// but not the serve seals (someone else sealed it first) is an error too.
func SealMemfd(f *os.File) error {
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("seal %s: F_GET_SEALS: %w", f.Name(), err)
	}
	if seals&memfdServeSeals == memfdServeSeals {
		return nil
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, memfdServeSeals); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("seal %s against writes: %w (F_SEAL_WRITE: %v)", f.Name(), ErrWritableMapping, err)
		}
		return fmt.Errorf("seal %s against writes (seals were %#x): %w", f.Name(), seals, err)
	}
	return nil
}

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
// the serve seals are for). It takes no memory until written. Fill it
// through the descriptor (pwrite) or a shared mapping that is unmapped
// before the daemon seals it; map it for reading with MapMemfdReadOnly.
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
// not keep SealMemfd from adding F_SEAL_WRITE. What a backend keeps mapped
// to Read or Digest its memfds.
func MapMemfdReadOnly(fd int, size uint64) ([]byte, error) {
	if size == 0 || size > math.MaxInt {
		return nil, Errorf(ErrInvalidArgument, "map a memfd of %d bytes", size)
	}
	return mmap.FD(fd, size, mmap.ReadPrivate)
}
