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
// buffer; the memcpy copies between two prefaulted buffers of copyChunk.
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
// bytes and returns the time taken: the memory bandwidth of one core.
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

// arenaRead reproduces the mock's situation on one thread: it reserves a
// shared-memory file of the files' total size under dir with fallocate
// (timed apart: the allocation the daemon does before its load), maps it
// and preads every file into it in 8 MiB chunks (timed: the copy into a
// fresh arena, minor page faults of the new mapping included). The file is
// removed afterwards.
func arenaRead(dir string, files []string) (bytes uint64, alloc, read time.Duration, err error) {
	var sizes []int64
	var total int64
	for _, path := range files {
		fi, err := os.Stat(path)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("arena read baseline: %w", err)
		}
		sizes = append(sizes, fi.Size())
		total += fi.Size()
	}
	f, err := os.CreateTemp(dir, "baseline-")
	if err != nil {
		return 0, 0, 0, fmt.Errorf("arena read baseline: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	start := time.Now()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, total); err != nil {
		return 0, 0, 0, fmt.Errorf("arena read baseline: fallocate %d bytes: %w", total, err)
	}
	alloc = time.Since(start)
	m, err := unix.Mmap(int(f.Fd()), 0, int(total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("arena read baseline: mmap: %w", err)
	}
	defer unix.Munmap(m)
	start = time.Now()
	var dest int64
	for i, path := range files {
		src, err := os.Open(path)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("arena read baseline: %w", err)
		}
		for off := int64(0); off < sizes[i]; {
			n, err := unix.Pread(int(src.Fd()), m[dest+off:dest+min(off+seqReadBuffer, sizes[i])], off)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || n == 0 {
				src.Close()
				return 0, 0, 0, fmt.Errorf("arena read baseline: read %s at %d: %v", path, off, err)
			}
			off += int64(n)
		}
		src.Close()
		dest += sizes[i]
	}
	return uint64(total), alloc, time.Since(start), nil
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
