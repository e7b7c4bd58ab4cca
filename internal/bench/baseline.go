package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Baseline buffer sizes: a sequential read uses a reader's usual large
// buffer; the memcpy copies between two prefaulted buffers of copyChunk
// (both small next to the checkpoint and already in memory: neither pays
// for allocating the memory it writes).
const (
	seqReadBuffer = 8 << 20
	copyChunk     = 64 << 20
)

// sequentialRead reads every file from start to end through one buffer and
// returns the bytes read and the time taken: the rate of the storage path
// (page cache when warm) with nothing else in the way.
func sequentialRead(files []string) (uint64, time.Duration, error) {
	buf := make([]byte, seqReadBuffer)
	var total uint64
	start := time.Now()
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return 0, 0, fmt.Errorf("sequential read: %w", err)
		}
		for {
			n, err := f.Read(buf)
			total += uint64(n)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.Close()
				return 0, 0, fmt.Errorf("sequential read %s: %w", path, err)
			}
		}
		f.Close()
	}
	return total, time.Since(start), nil
}

// memcpy copies total bytes between two prefaulted buffers of copyChunk
// bytes and returns the time taken: the memory bandwidth of one core, with
// no page allocated (freshMemcpy is the same copy into fresh shared memory).
func memcpy(total uint64) time.Duration {
	src, dst := make([]byte, copyChunk), make([]byte, copyChunk)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault dst in
	start := time.Now()
	for left := total; left > 0; {
		n := min(left, copyChunk)
		copy(dst[:n], src[:n])
		left -= n
	}
	return time.Since(start)
}

// onTmpfs reports whether dir lives on tmpfs (or ramfs), where dropping the
// page cache cannot make a read cold.
func onTmpfs(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Clean(dir), &st); err != nil {
		return false
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}
