package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/internal/mmap"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/fill"
	"github.com/wcache/wcache/sdk/mock"
	"github.com/wcache/wcache/test/benchreport"
)

// Fills of fresh shared memory without wcache: the baselines that locate
// the cost of the daemon's fill. Each creates a file in the shared-memory
// folder (the file system the mock uses), fills it in one way and removes
// it; creating, sizing and mapping the file is timed apart from the fill,
// as the mock's Allocate is apart from its Load.

// The mock backend's Load tuning (sdk/mock/load.go, the engine of the mock
// plugin: the sdk/fill pipeline with its default readers and one
// mock.LoadChunk buffer each), taken from it so that the bare pattern is
// the mock's own; the other probes cut their work into mockChunk pieces.
const (
	mockChunk  = 8 << 20
	mockBounce = mock.LoadChunk
	// pageSize is the page size faults and allocation costs count in.
	pageSize = 4096
)

// Probe is one way of filling fresh shared memory over Runs: times and
// rates fill (the copy) and times allocate (creating, sizing and mapping
// the file); rate end_to_end counts both; MinorFaultsPerPage, the median
// of this process's minor faults during the fill per 4 KiB page.
type Probe struct {
	Runs               int     `json:"runs"`
	MinorFaultsPerPage float64 `json:"minor_faults_per_page"`
	benchreport.Figures
}

// probeOf summarises the runs of one probe (nil when there is none).
func probeOf(ts []fillTiming) *Probe {
	if len(ts) == 0 {
		return nil
	}
	l, rates, faults := laps{}, series{}, series{}
	for _, t := range ts {
		l["allocate"], l["fill"] = append(l["allocate"], t.Alloc), append(l["fill"], t.Fill)
		rates.Add("fill", benchreport.GiBps(t.Bytes, t.Fill))
		rates.Add("end_to_end", benchreport.GiBps(t.Bytes, t.Alloc+t.Fill))
		faults.Add("", float64(t.MinorFaults)/float64(max(t.Bytes/pageSize, 1)))
	}
	return &Probe{Runs: len(ts), MinorFaultsPerPage: faults.Med(""), Figures: benchreport.FiguresOf(l, rates)}
}

// fillTiming is one fill of fresh shared memory: Alloc the file's
// creation, sizing and mapping, Fill the copy, MinorFaults this process's
// minor page faults during Fill.
type fillTiming struct {
	Bytes       uint64
	Alloc, Fill time.Duration
	MinorFaults uint64
}

// rate is the fill's GiB/s.
func (t fillTiming) rate() float64 { return benchreport.GiBps(t.Bytes, t.Fill) }

// fillFresh creates a file of total bytes in dir, sizes it with ftruncate
// (sparse: no memory is taken) and maps it shared, read-write (Alloc, in
// the first timing); then it runs each fill on the file f and its mapping
// data in turn and times them (one timing each, even on an error, which
// names the probe), and removes the file (its memory goes back).
func fillFresh(name, dir string, total int64, fills ...func(f *os.File, data []byte) error) (ts []fillTiming, err error) {
	ts = make([]fillTiming, len(fills))
	start := time.Now()
	f, err := os.CreateTemp(dir, "baseline-")
	if err != nil {
		return ts, fmt.Errorf("%s: %w", name, err)
	}
	var data []byte
	defer func() {
		if data != nil {
			err = errors.Join(err, mmap.Unmap(data))
		}
		if err = errors.Join(err, f.Close(), os.Remove(f.Name())); err != nil {
			err = fmt.Errorf("%s: %w", name, err)
		}
	}()
	if err = f.Truncate(total); err == nil {
		data, err = mmap.FD(int(f.Fd()), uint64(total), mmap.ReadWrite)
	}
	if err != nil {
		return ts, err
	}
	alloc := time.Since(start)
	for i, fill := range fills {
		var ru0, ru1 unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
		start := time.Now()
		if err := fill(f, data); err != nil {
			return ts, err
		}
		ts[i] = fillTiming{Bytes: uint64(total), Alloc: alloc, Fill: time.Since(start)}
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
		ts[i].MinorFaults, alloc = uint64(ru1.Minflt-ru0.Minflt), 0
	}
	return ts, nil
}

// inChunks cuts total bytes into mockChunk pieces and hands them out in
// order to max(workers, 1) goroutines, as the mock's Load does. The first
// error stops the hand-out and is returned once every worker ended.
func inChunks(total int64, workers int, work func(off, n int64) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, max(workers, 1))
	for w := range errs {
		wg.Go(func() {
			for off := next.Add(mockChunk) - mockChunk; off < total; off = next.Add(mockChunk) - mockChunk {
				if errs[w] = work(off, min(mockChunk, total-off)); errs[w] != nil {
					next.Store(total)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// mockPattern fills fresh shared memory as the mock backend does:
// ftruncate a new file and map it (Alloc), then the shared fill pipeline
// (sdk/fill, the mock's options) preads each chunk of the checkpoint into
// a 1 MiB buffer per reader and pwrites it into the file (Fill). The
// writes allocate the pages.
func mockPattern(dir string, files []string, workers int) (fillTiming, error) {
	extents, total, err := extentsOf(files)
	if err != nil {
		return fillTiming{}, fmt.Errorf("mock pattern: %w", err)
	}
	ts, err := fillFresh("mock pattern", dir, int64(total), func(f *os.File, _ []byte) error {
		_, err := fill.Fill(context.Background(), fill.WriterAt{W: f}, total, extents, nil,
			fill.Options{Readers: workers, Buffers: 1, BufferBytes: mockBounce})
		return err
	})
	return ts[0], err
}

// extentsOf is the whole of every file, laid end to end in a destination
// of total bytes.
func extentsOf(files []string) (extents []sdk.Extent, total uint64, err error) {
	for _, path := range files {
		fi, err := os.Stat(path)
		if err != nil {
			return nil, 0, err
		}
		extents = append(extents, sdk.Extent{Path: path, Length: uint64(fi.Size()), DestOffset: total})
		total += uint64(fi.Size())
	}
	return extents, total, nil
}

// patterned is n bytes of a pattern, faulted in.
func patterned(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

// freshMemcpy copies total bytes from a prefaulted copyChunk-byte source
// into the mapping of a new sparse file in dir, in mockChunk pieces on
// workers goroutines: memory bandwidth plus the allocation of every page
// (one fault per 4 KiB page on first write), no file read.
func freshMemcpy(dir string, total int64, workers int) (fillTiming, error) {
	src := patterned(copyChunk)
	ts, err := fillFresh("memcpy into fresh shared memory", dir, total, func(_ *os.File, data []byte) error {
		return inChunks(total, workers, func(off, n int64) error {
			from := off % copyChunk // copyChunk is a multiple of mockChunk: a piece never wraps
			copy(data[off:off+n], src[from:from+n])
			return nil
		})
	})
	return ts[0], err
}

// freshWrite pwrites a prefaulted mockBounce-byte buffer over a new sparse
// file of total bytes in dir, in mockChunk pieces on workers goroutines
// (the write half of the mock's pattern), then the same again over the
// same file, whose pages now exist: the difference is what allocating the
// pages costs.
func freshWrite(dir string, total int64, workers int) (fresh, allocated fillTiming, err error) {
	src := patterned(mockBounce)
	write := func(f *os.File, _ []byte) error {
		return inChunks(total, workers, func(off, n int64) error {
			for done := int64(0); done < n; done += int64(len(src)) {
				if _, err := f.WriteAt(src[:min(int64(len(src)), n-done)], off+done); err != nil {
					return err
				}
			}
			return nil
		})
	}
	ts, err := fillFresh("write into fresh shared memory", dir, total, write, write)
	return ts[0], ts[1], err
}
