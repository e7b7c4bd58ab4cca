package mockbackend

import (
	"errors"
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk"
)

// memfdSeals are the seals of every allocation memfd: its size is fixed
// (no holder can shrink it under another's mapping, which would make that
// mapping fault with SIGBUS, nor grow it), and no further seal can be added
// (no holder can forbid writes to the others).
const memfdSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// createMemfd creates an anonymous memfd of size bytes (no name in any
// folder: the memory lives as long as a descriptor or a mapping of it),
// seals its size and maps it read-write. Like a file, it takes no memory
// until Load writes it.
func (b *Backend) createMemfd(id sdk.AllocationID, ordinal int, size uint64) (*allocation, error) {
	name := fmt.Sprintf("wcache-mock-%s-%d", b.nonce, id)
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create %s: %w", name, err)
	}
	fail := func(err error) (*allocation, error) {
		_ = unix.Close(fd)
		return nil, err
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail(fmt.Errorf("size memfd %s to %d bytes: %w", name, size, err))
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, memfdSeals); err != nil {
		return fail(fmt.Errorf("seal memfd %s: %w", name, err))
	}
	data, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		if errors.Is(err, unix.ENOMEM) {
			return fail(sdk.Errorf(sdk.ErrOutOfMemory, "map %d bytes: %v", size, err))
		}
		return fail(fmt.Errorf("map memfd %s: %w", name, err))
	}
	return &allocation{id: id, ordinal: ordinal, size: size, path: "memfd:" + name, memfd: true, data: data, fd: fd}, nil
}

// CheckMemfd verifies that f is a memfd of exactly size bytes whose size is
// sealed (F_SEAL_SHRINK: no holder can make a mapping of it fault).
// Anything else is ErrInvalidArgument.
func CheckMemfd(f *os.File, size uint64) error {
	fd := int(f.Fd())
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return sdk.Errorf(sdk.ErrInvalidArgument, "descriptor is not a memfd (F_GET_SEALS: %v)", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return sdk.Errorf(sdk.ErrInvalidArgument, "memfd is not sealed against shrinking (seals %#x)", seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat memfd: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != int64(size) {
		return sdk.Errorf(sdk.ErrInvalidArgument, "memfd of %d bytes (mode %o), the handle says %d", st.Size, st.Mode, size)
	}
	return nil
}

// importMemfd adopts a memfd handle: the descriptor is checked (a sealed
// memfd of the handle's size), duplicated and mapped, read-write when the
// descriptor allows it (the daemon's own, so that a restarted plugin or a
// successor daemon serves the memory as its own), read-only otherwise (a
// client's read-only copy). The result can be exported again; it is not
// counted against the device's capacity.
func (b *Backend) importMemfd(ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	if h.File == nil {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import a memfd handle without its descriptor")
	}
	if h.Size == 0 || h.Size > math.MaxInt64 {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import a memfd handle of %d bytes", h.Size)
	}
	if err := CheckMemfd(h.File, h.Size); err != nil {
		return 0, fmt.Errorf("import memfd handle: %w", err)
	}
	fd, err := unix.FcntlInt(h.File.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("import memfd handle: dup: %w", err)
	}
	data, err := unix.Mmap(fd, 0, int(h.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if errors.Is(err, unix.EACCES) {
		data, err = unix.Mmap(fd, 0, int(h.Size), unix.PROT_READ, unix.MAP_SHARED)
	}
	if err != nil {
		_ = unix.Close(fd)
		return 0, fmt.Errorf("import memfd handle: map: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		_ = unix.Munmap(data)
		_ = unix.Close(fd)
		return 0, sdk.Errorf(sdk.ErrUnavailable, "mock backend is shutting down")
	}
	id := b.nextID
	b.nextID++
	b.allocs[id] = &allocation{id: id, ordinal: ordinal, size: h.Size, path: fmt.Sprintf("memfd:imported-%d", id),
		memfd: true, adopted: true, data: data, fd: fd}
	return id, nil
}
