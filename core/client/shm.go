package client

import (
	"fmt"

	"github.com/wcache/wcache/internal/mmap"
)

// MapShm maps size bytes of the shared-memory file at path as a client
// process maps a posix-shm handle: copy-on-write (mmap.CopyOnWrite). The file is
// opened read-only and O_NOFOLLOW (a symlink planted at the path is
// refused) and closed again: the mapping stays valid until Unmap. A size of
// 0 maps nothing and returns an empty slice.
func MapShm(path string, size uint64) ([]byte, error) {
	data, err := mmap.Path(path, size, mmap.CopyOnWrite, mmap.Any)
	if err != nil {
		return nil, fmt.Errorf("map shared memory: %w", err)
	}
	return data, nil
}

// Unmap releases a mapping made by MapShm or MapFile; an empty slice is a
// no-op.
func Unmap(data []byte) error { return mmap.Unmap(data) }
