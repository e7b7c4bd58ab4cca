package mockbackend

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk"
)

// checkFolderSpaceLocked refuses, with ErrOutOfMemory, an allocation of
// size bytes that the folder's file system clearly cannot hold: more than
// its free space (statfs f_bavail) less the bytes this backend's own
// allocations have yet to fill (allocation files are sparse until Load
// writes them, so the file system does not count them yet). A file system
// that reports no block count (tmpfs mounted with size=0 is unlimited)
// is not checked. Allocations of other processes in the same folder are
// not known here; a Load that then finds the folder full fails with
// ErrOutOfMemory (see writeChunk). The caller holds b.mu, which keeps
// every listed allocation's file open.
func (b *Backend) checkFolderSpaceLocked(size uint64) error {
	var st unix.Statfs_t
	if err := unix.Statfs(b.dir, &st); err != nil {
		return fmt.Errorf("free space of %s: %w", b.dir, err)
	}
	if st.Blocks == 0 {
		return nil
	}
	avail := st.Bavail * uint64(st.Bsize)
	var pending uint64
	for _, a := range b.allocs {
		if a.imported || a.memfd {
			continue
		}
		var fst unix.Stat_t
		if err := unix.Fstat(a.fd, &fst); err != nil {
			return fmt.Errorf("free space of %s: stat %s: %w", b.dir, a.path, err)
		}
		if filled := uint64(fst.Blocks) * 512; filled < a.size {
			pending += a.size - filled
		}
	}
	if free := avail - min(avail, pending); size > free {
		return sdk.Errorf(sdk.ErrOutOfMemory, "%s has %d bytes free, %d of them promised to this backend's unfilled allocations: %d bytes do not fit",
			b.dir, avail, min(avail, pending), size)
	}
	return nil
}
