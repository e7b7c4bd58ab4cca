package client

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk/names"
)

// HandlePosixShm is the handle kind whose Data is the path of a
// shared-memory file (the mock backend's, and any host-memory backend's).
// It is the kind a client maps itself; see Map.
const HandlePosixShm = names.KindPosixShm

// MapShm maps size bytes of the shared-memory file at path read-only and
// shared, as a client process maps a posix-shm handle. The file is opened
// O_NOFOLLOW (a symlink planted at the path is refused) and closed again:
// the mapping stays valid until Unmap. A size of 0 maps nothing and returns
// an empty slice. Writing to the returned bytes faults (SIGSEGV): they are
// the daemon's memory.
func MapShm(path string, size uint64) ([]byte, error) {
	if size == 0 {
		return []byte{}, nil
	}
	if size > uint64(maxInt) {
		return nil, fmt.Errorf("map %s: %d bytes do not fit in this address space", path, size)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open shared memory %s: %w", path, err)
	}
	defer unix.Close(fd)
	data, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s (%d bytes): %w", path, size, err)
	}
	return data, nil
}

// Unmap releases a mapping made by MapShm; an empty slice is a no-op.
func Unmap(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	if err := unix.Munmap(data); err != nil {
		return fmt.Errorf("munmap: %w", err)
	}
	return nil
}

// maxInt is the largest int.
const maxInt = int(^uint(0) >> 1)
