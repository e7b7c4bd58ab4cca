package client

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk/names"
)

// HandlePosixShm is the handle kind whose Data is the path of a
// shared-memory file (the mock backend's, and any host-memory backend's).
// It is the kind a client maps itself; see Map.
const HandlePosixShm = names.KindPosixShm

// MapShm maps size bytes of the shared-memory file at path as a client
// process maps a posix-shm handle: copy-on-write (mapPrivate). The file is
// opened read-only and O_NOFOLLOW (a symlink planted at the path is
// refused) and closed again: the mapping stays valid until Unmap. A size of
// 0 maps nothing and returns an empty slice.
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
	data, err := mapPrivate(fd, size)
	if err != nil {
		return nil, fmt.Errorf("mmap %s (%d bytes): %w", path, size, err)
	}
	return data, nil
}

// mapPrivate maps size bytes of fd copy-on-write (MAP_PRIVATE,
// PROT_READ|PROT_WRITE, MAP_NORESERVE): the bytes are the daemon's until
// this process writes to a page, which then becomes a private copy — a
// write never reaches the daemon or another client, and never faults. A
// kernel that refuses a writable private mapping of a write-sealed memfd
// (before Linux 6.7, EPERM) gets a read-only shared mapping instead, where
// a write faults (SIGSEGV) as it did before copy-on-write mappings.
func mapPrivate(fd int, size uint64) ([]byte, error) {
	data, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_NORESERVE)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		data, err = unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	}
	return data, err
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
