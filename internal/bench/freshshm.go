package bench

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Fills of fresh shared memory without wcache: the baselines that locate
// the cost of row 3's fill. Each creates a file in a shared-memory folder
// (the parent of the mock's own folders: the same file system), fills it
// in one way, and removes it. Creating, sizing and mapping the file is
// timed apart from the fill, as the mock's Allocate is apart from its Load.

// The mock backend's Load tuning (plugins/mock/mockbackend/load.go:
// loadChunk, loadBounce, loadWorkers), mirrored so that the bare pattern
// is the mock's own.
const (
	mockChunk      = 8 << 20
	mockBounce     = 1 << 20
	mockMaxWorkers = 4
)

// mockLoadWorkers is how many goroutines the mock backend's Load uses:
// min(4, GOMAXPROCS).
func mockLoadWorkers() int { return min(mockMaxWorkers, runtime.GOMAXPROCS(0)) }

// Probe is one way of filling fresh shared memory without wcache,
// measured in the same run as the daemon: medians over Runs.
type Probe struct {
	Runs int `json:"runs"`
	// Allocate is creating, sizing and mapping the file; Fill the copy.
	Allocate Summary `json:"allocate"`
	Fill     Summary `json:"fill"`
	// FillGiBps is bytes / Fill, EndToEndGiBps bytes / (Allocate + Fill).
	FillGiBps     float64 `json:"fill_gib_per_s"`
	EndToEndGiBps float64 `json:"end_to_end_gib_per_s"`
	// MinorFaultsPerPage is the harness's minor page faults during the
	// fill per 4 KiB page filled.
	MinorFaultsPerPage float64 `json:"minor_faults_per_page"`
}

// probeSeries collects the runs of one probe.
type probeSeries struct {
	alloc, fill                 []time.Duration
	fillRates, endRates, faults []float64
}

func (s *probeSeries) add(t fillTiming) {
	s.alloc, s.fill = append(s.alloc, t.Alloc), append(s.fill, t.Fill)
	s.fillRates = append(s.fillRates, gibps(t.Bytes, t.Fill))
	s.endRates = append(s.endRates, gibps(t.Bytes, t.Alloc+t.Fill))
	s.faults = append(s.faults, float64(t.MinorFaults)/float64(max(t.Bytes/pageSize, 1)))
}

// probe summarises the series (nil when it has no run).
func (s *probeSeries) probe() *Probe {
	if len(s.fill) == 0 {
		return nil
	}
	return &Probe{Runs: len(s.fill), Allocate: Summarize(s.alloc), Fill: Summarize(s.fill),
		FillGiBps: round3(MedianFloat(s.fillRates)), EndToEndGiBps: round3(MedianFloat(s.endRates)),
		MinorFaultsPerPage: round3(MedianFloat(s.faults))}
}

// pageSize is the page size the probes count in.
const pageSize = 4096

// fillTiming is one fill of fresh shared memory.
type fillTiming struct {
	Bytes uint64
	// Alloc is creating, sizing and mapping the file; Fill is the copy.
	Alloc, Fill time.Duration
	// MinorFaults are this process's minor page faults during Fill.
	MinorFaults uint64
}

// shmFile is a fresh file in a shared-memory folder, mapped read-write.
type shmFile struct {
	f    *os.File
	data []byte
}

// newShmFile creates a file of size bytes in dir, sizes it with ftruncate
// (sparse: no memory is taken) and maps it shared, read-write.
func newShmFile(dir string, size int64) (*shmFile, error) {
	f, err := os.CreateTemp(dir, "baseline-")
	if err != nil {
		return nil, fmt.Errorf("fresh shared memory: %w", err)
	}
	fail := func(err error) (*shmFile, error) {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		return fail(fmt.Errorf("fresh shared memory: %w", err))
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("fresh shared memory: map %s: %w", f.Name(), err))
	}
	return &shmFile{f: f, data: data}, nil
}

// fd is the file's descriptor.
func (s *shmFile) fd() int { return int(s.f.Fd()) }

// Close unmaps, closes and removes the file (its memory goes back).
func (s *shmFile) Close() error {
	var errs []error
	if err := unix.Munmap(s.data); err != nil {
		errs = append(errs, fmt.Errorf("unmap %s: %w", s.f.Name(), err))
	}
	if err := s.f.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := os.Remove(s.f.Name()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// fillChunk is one piece of a fill: n bytes at off of source file, to
// dest in the destination.
type fillChunk struct {
	file      int
	off, dest int64
	n         int64
}

// chunksOf cuts sources of the given sizes, laid end to end in the
// destination, into pieces of at most mockChunk bytes, in order.
func chunksOf(sizes []int64) []fillChunk {
	var out []fillChunk
	var dest int64
	for i, size := range sizes {
		for off := int64(0); off < size; off += mockChunk {
			out = append(out, fillChunk{file: i, off: off, dest: dest + off, n: min(mockChunk, size-off)})
		}
		dest += size
	}
	return out
}

// runChunks hands chunks out in order to max(workers, 1) goroutines, as
// the mock's Load does. Each worker allocates its own bufSize-byte buffer
// (none when 0) and calls work for each chunk it takes. The first error
// stops the hand-out and is returned once every worker has finished.
func runChunks(chunks []fillChunk, workers, bufSize int, work func(buf []byte, c fillChunk) error) error {
	var (
		next  atomic.Int64
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			if bufSize > 0 {
				buf = make([]byte, bufSize)
			}
			for {
				i := next.Add(1) - 1
				if i >= int64(len(chunks)) {
					return
				}
				if err := work(buf, chunks[i]); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(len(chunks)))
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// timeFill runs fn and returns its wall time and this process's minor
// page faults meanwhile.
func timeFill(fn func() error) (time.Duration, uint64, error) {
	before := minorFaults()
	start := time.Now()
	err := fn()
	took := time.Since(start)
	return took, minorFaults() - before, err
}

// minorFaults is this process's minor page-fault count (getrusage).
func minorFaults() uint64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return uint64(ru.Minflt)
}

// openSources opens files for reading and returns them with their sizes
// and total size.
func openSources(files []string) ([]*os.File, []int64, int64, error) {
	var srcs []*os.File
	var sizes []int64
	var total int64
	for _, path := range files {
		f, err := os.Open(path)
		if err == nil {
			var fi os.FileInfo
			if fi, err = f.Stat(); err == nil {
				sizes, total = append(sizes, fi.Size()), total+fi.Size()
				srcs = append(srcs, f)
				continue
			}
			_ = f.Close()
		}
		closeAll(srcs)
		return nil, nil, 0, fmt.Errorf("fill baseline: %w", err)
	}
	return srcs, sizes, total, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// mockPattern fills fresh shared memory as the mock backend does: ftruncate a new file in dir and map it (Alloc), then
// workers copy each chunk through a mockBounce-byte buffer of their own,
// pread from the checkpoint and pwrite into the file at the chunk's
// destination (Fill). The pages are allocated by the writes.
func mockPattern(dir string, files []string, workers int) (t fillTiming, err error) {
	srcs, sizes, total, err := openSources(files)
	if err != nil {
		return t, err
	}
	defer closeAll(srcs)
	start := time.Now()
	dst, err := newShmFile(dir, total)
	if err != nil {
		return t, err
	}
	t.Alloc, t.Bytes = time.Since(start), uint64(total)
	defer func() { err = errors.Join(err, dst.Close()) }()
	t.Fill, t.MinorFaults, err = timeFill(func() error { return copyThrough(srcs, chunksOf(sizes), dst.fd(), workers) })
	if err != nil {
		return fillTiming{}, fmt.Errorf("mock pattern: %w", err)
	}
	return t, nil
}

// copyThrough copies every chunk from its source into the file dst at the
// chunk's destination, through a mockBounce-byte buffer per worker: the
// mock's Load loop.
func copyThrough(srcs []*os.File, chunks []fillChunk, dst int, workers int) error {
	return runChunks(chunks, workers, mockBounce, func(buf []byte, c fillChunk) error {
		for done := int64(0); done < c.n; {
			n := min(int64(len(buf)), c.n-done)
			if err := preadFull(srcs[c.file], buf[:n], c.off+done); err != nil {
				return err
			}
			if err := pwriteFull(dst, buf[:n], c.dest+done); err != nil {
				return err
			}
			done += n
		}
		return nil
	})
}

// freshMemcpy copies total bytes from a prefaulted copyChunk-byte source
// into the mapping of a new sparse file in dir, in mockChunk pieces on
// workers goroutines: memory bandwidth plus the allocation of every page
// of the destination (one fault per 4 KiB page on first write), with no
// file read. Alloc is the ftruncate and mmap.
func freshMemcpy(dir string, total int64, workers int) (t fillTiming, err error) {
	src := make([]byte, copyChunk)
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	start := time.Now()
	dst, err := newShmFile(dir, total)
	if err != nil {
		return t, err
	}
	t.Alloc, t.Bytes = time.Since(start), uint64(total)
	defer func() { err = errors.Join(err, dst.Close()) }()
	t.Fill, t.MinorFaults, err = timeFill(func() error {
		return runChunks(chunksOf([]int64{total}), workers, 0, func(_ []byte, c fillChunk) error {
			// copyChunk is a multiple of mockChunk: a piece never wraps.
			from := c.dest % copyChunk
			copy(dst.data[c.dest:c.dest+c.n], src[from:from+c.n])
			return nil
		})
	})
	return t, err
}

// freshWrite pwrites a prefaulted mockBounce-byte buffer over a new sparse
// file of total bytes in dir, in mockChunk pieces on workers goroutines
// (the write half of the mock's pattern, no read), then does the same
// again over the same file, whose pages now exist. The difference between
// the two fills is what allocating the pages costs.
func freshWrite(dir string, total int64, workers int) (fresh, allocated fillTiming, err error) {
	src := make([]byte, mockBounce)
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	start := time.Now()
	dst, err := newShmFile(dir, total)
	if err != nil {
		return fresh, allocated, err
	}
	fresh.Alloc, fresh.Bytes, allocated.Bytes = time.Since(start), uint64(total), uint64(total)
	defer func() { err = errors.Join(err, dst.Close()) }()
	chunks := chunksOf([]int64{total})
	write := func() error {
		return runChunks(chunks, workers, 0, func(_ []byte, c fillChunk) error {
			for done := int64(0); done < c.n; {
				n := min(int64(len(src)), c.n-done)
				if err := pwriteFull(dst.fd(), src[:n], c.dest+done); err != nil {
					return err
				}
				done += n
			}
			return nil
		})
	}
	if fresh.Fill, fresh.MinorFaults, err = timeFill(write); err != nil {
		return fillTiming{}, fillTiming{}, fmt.Errorf("write into fresh shared memory: %w", err)
	}
	if allocated.Fill, allocated.MinorFaults, err = timeFill(write); err != nil {
		return fillTiming{}, fillTiming{}, fmt.Errorf("write over allocated shared memory: %w", err)
	}
	return fresh, allocated, nil
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

// pwriteFull writes all of src to fd at off.
func pwriteFull(fd int, src []byte, off int64) error {
	for len(src) > 0 {
		n, err := unix.Pwrite(fd, src, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("write at %d: %w", off, err)
		}
		if n == 0 {
			return fmt.Errorf("write at %d: no progress", off)
		}
		src, off = src[n:], off+int64(n)
	}
	return nil
}
