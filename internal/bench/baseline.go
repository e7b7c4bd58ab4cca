package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
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

// arenaRead reproduces the mock's situation: it reserves a shared-memory
// file of the files' total size under dir with fallocate (timed apart: the
// allocation the daemon does before its load), maps it and preads every
// file into it in 8 MiB chunks (timed: the copy into a fresh arena, minor
// page faults of the new mapping included). With workers > 1 the chunks
// are handed out in file order to that many goroutines, as the mock's
// Load does. The file is removed afterwards.
func arenaRead(dir string, files []string, workers int) (bytes uint64, alloc, read time.Duration, err error) {
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
	srcs := make([]*os.File, len(files))
	for i, path := range files {
		if srcs[i], err = os.Open(path); err != nil {
			return 0, 0, 0, fmt.Errorf("arena read baseline: %w", err)
		}
		defer srcs[i].Close()
	}
	type chunk struct {
		file      int
		off, dest int64
		n         int64
	}
	work := make(chan chunk)
	errs := make(chan error, max(workers, 1))
	var wg sync.WaitGroup
	start = time.Now()
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				if err := preadFull(srcs[c.file], m[c.dest:c.dest+c.n], c.off); err != nil {
					errs <- err
					for range work {
					}
					return
				}
			}
		}()
	}
	var dest int64
	for i, size := range sizes {
		for off := int64(0); off < size; off += seqReadBuffer {
			work <- chunk{file: i, off: off, dest: dest + off, n: min(seqReadBuffer, size-off)}
		}
		dest += size
	}
	close(work)
	wg.Wait()
	read = time.Since(start)
	select {
	case err := <-errs:
		return 0, 0, 0, fmt.Errorf("arena read baseline: %w", err)
	default:
	}
	return uint64(total), alloc, read, nil
}

// preadFull fills dst from f at off.
func preadFull(f *os.File, dst []byte, off int64) error {
	for len(dst) > 0 {
		n, err := unix.Pread(int(f.Fd()), dst, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s at %d: %w", f.Name(), off, err)
		}
		if n == 0 {
			return fmt.Errorf("read %s at %d: unexpected end of file", f.Name(), off)
		}
		dst, off = dst[n:], off+int64(n)
	}
	return nil
}

// mockLoadWorkers is how many goroutines the mock backend's Load uses:
// min(4, GOMAXPROCS) (plugins/mock/mockbackend/load.go). The parallel
// baseline copies that pattern.
func mockLoadWorkers() int { return min(4, runtime.GOMAXPROCS(0)) }

// onTmpfs reports whether dir lives on tmpfs (or ramfs), where dropping the
// page cache cannot make a read cold.
func onTmpfs(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Clean(dir), &st); err != nil {
		return false
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}
