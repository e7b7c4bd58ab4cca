package mockbackend

import (
	"errors"
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mmap"
)

// memfdSeals are the seals of every allocation memfd (sdk.MemfdSeals).
const memfdSeals = sdk.MemfdSeals

// createMemfd creates an anonymous memfd of size bytes (no name in any
// folder: the memory lives as long as a descriptor or a mapping of it),
// seals its size and maps it for reading (sdk.MapMemfdReadOnly: Load
// writes through the descriptor, and no writable mapping keeps the daemon
// from sealing the memory against writes once it is filled). Like a file,
// it takes no memory until Load writes it.
func (b *Backend) createMemfd(id sdk.AllocationID, ordinal int, size uint64) (*allocation, error) {
	name := fmt.Sprintf("wcache-mock-%s-%d", b.nonce, id)
	f, err := sdk.NewMemfd(name, size)
	if err != nil {
		return nil, err
	}
	// The allocation keeps a raw descriptor (closed by release), not f.
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("dup memfd %s: %w", name, err)
	}
	fail := func(err error) (*allocation, error) {
		_ = unix.Close(fd)
		return nil, err
	}
	data, err := sdk.MapMemfdReadOnly(fd, size)
	if err != nil {
		if errors.Is(err, unix.ENOMEM) {
			return fail(sdk.Errorf(sdk.ErrOutOfMemory, "map %d bytes: %v", size, err))
		}
		return fail(fmt.Errorf("map memfd %s: %w", name, err))
	}
	return &allocation{id: id, ordinal: ordinal, size: size, path: "memfd:" + name, memfd: true, data: data, fd: fd}, nil
}

// CheckMemfd is sdk.CheckMemfd.
func CheckMemfd(f *os.File, size uint64) error { return sdk.CheckMemfd(f, size) }

// importMemfd adopts a memfd handle: the descriptor is checked (a sealed
// memfd of the handle's size), duplicated and mapped for reading
// (sdk.MapMemfdReadOnly), so that a restarted plugin or a successor daemon
// serves the memory as its own. The result can be exported again (the
// duplicate keeps the access of the descriptor it was given); it is not
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
	data, err := sdk.MapMemfdReadOnly(fd, h.Size)
	if err != nil {
		_ = unix.Close(fd)
		return 0, fmt.Errorf("import memfd handle: map: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		_ = mmap.Unmap(data)
		_ = unix.Close(fd)
		return 0, sdk.Errorf(sdk.ErrUnavailable, "mock backend is shutting down")
	}
	id := b.nextID
	b.nextID++
	b.allocs[id] = &allocation{id: id, ordinal: ordinal, size: h.Size, path: fmt.Sprintf("memfd:imported-%d", id),
		memfd: true, adopted: true, data: data, fd: fd}
	return id, nil
}
