package client

import (
	"fmt"

	"github.com/wcache/wcache/sdk/mmap"
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
	data, err := mmap.Path(path, size, mmap.Read, mmap.Any)
	if err != nil {
		return nil, fmt.Errorf("map shared memory: %w", err)
	}
	return data, nil
}

// Unmap releases a mapping made by MapShm or MapFile; an empty slice is a
// no-op.
func Unmap(data []byte) error { return mmap.Unmap(data) }
