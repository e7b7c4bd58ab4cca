package testproc

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/internal/mmap"
)

// The page cache's state for the benchmarks: drop it before a cold read,
// and measure how much of a checkpoint it holds.

// DropCaches writes back dirty pages and drops the page cache (root only).
func DropCaches() error {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
		return fmt.Errorf("drop the page cache: %w", err)
	}
	return nil
}

// ResidentFraction is the share of the files' pages in the page cache
// (mincore on a read-only mapping), or -1 when it cannot be measured.
func ResidentFraction(files []string) float64 {
	var in, all uint64
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return -1
		}
		fi, err := f.Stat()
		var m []byte
		if err == nil && fi.Size() > 0 {
			m, err = mmap.FD(int(f.Fd()), uint64(fi.Size()), mmap.Read)
		}
		f.Close()
		if err != nil {
			return -1
		} else if len(m) == 0 {
			continue
		}
		vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
		err = mmap.Mincore(m, vec)
		_ = mmap.Unmap(m)
		if err != nil {
			return -1
		}
		for _, v := range vec {
			in += uint64(v & 1)
		}
		all += uint64(len(vec))
	}
	if all == 0 {
		return -1
	}
	return math.Round(float64(in)/float64(all)*1000) / 1000
}
