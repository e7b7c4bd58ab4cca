package fill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk"
)

// fakeCopier copies into a byte slice on a goroutine per copy, after
// delay, reading the staging buffer only then: a buffer refilled before
// its Completion was waited for corrupts the result, as on a GPU. It
// counts the writes to every destination byte and checks that each lane
// is used from the OS thread that acquired it.
type fakeCopier struct {
	t     *testing.T
	dst   []byte
	delay time.Duration
	sem   chan struct{} // limits lanes when not nil
	// failCopy makes the copy with this 1-based number fail in Wait;
	// failQueue makes CopyAsync number n fail.
	failCopy, failQueue int64

	mu       sync.Mutex
	writes   []uint8
	copies   []copyRec
	acquired int
	released []error

	queued      atomic.Int64
	outstanding atomic.Int64
	wrong       atomic.Value // first misuse seen, a string
}

type copyRec struct {
	lane int
	dst  uint64
	n    int
}

func newFakeCopier(t *testing.T, size int) *fakeCopier {
	return &fakeCopier{t: t, dst: make([]byte, size), writes: make([]uint8, size)}
}

func (c *fakeCopier) misuse(format string, args ...any) {
	c.wrong.CompareAndSwap(nil, fmt.Sprintf(format, args...))
}

func (c *fakeCopier) Acquire(ctx context.Context, buffers, size int) (Lane, error) {
	if c.sem != nil {
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c.mu.Lock()
	c.acquired++
	id := c.acquired
	c.mu.Unlock()
	l := &fakeLane{c: c, id: id, tid: unix.Gettid(), pending: make([]bool, buffers)}
	for range buffers {
		b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, err
		}
		l.bufs = append(l.bufs, b)
	}
	return l, nil
}

type fakeLane struct {
	c       *fakeCopier
	id, tid int
	bufs    [][]byte
	mu      sync.Mutex
	pending []bool
}

func (l *fakeLane) checkThread(what string) {
	if tid := unix.Gettid(); tid != l.tid {
		l.c.misuse("lane %d: %s on thread %d, acquired on %d", l.id, what, tid, l.tid)
	}
}

func (l *fakeLane) Buffer(i int) []byte {
	l.checkThread("Buffer")
	return l.bufs[i]
}

func (l *fakeLane) CopyAsync(i, off, n int, dst uint64) (Completion, error) {
	l.checkThread("CopyAsync")
	c := l.c
	num := c.queued.Add(1)
	if num == c.failQueue {
		return nil, errors.New("injected queue failure")
	}
	l.mu.Lock()
	if l.pending[i] {
		c.misuse("lane %d: buffer %d queued again before its copy was waited for", l.id, i)
	}
	l.pending[i] = true
	l.mu.Unlock()
	c.mu.Lock()
	c.copies = append(c.copies, copyRec{lane: l.id, dst: dst, n: n})
	c.mu.Unlock()
	c.outstanding.Add(1)
	comp := &fakeCompletion{done: make(chan struct{})}
	if num == c.failCopy {
		comp.err = errors.New("injected copy failure")
	}
	src := l.bufs[i][off : off+n]
	go func() {
		defer close(comp.done)
		defer c.outstanding.Add(-1)
		time.Sleep(c.delay)
		if comp.err != nil {
			return
		}
		c.mu.Lock()
		copy(c.dst[dst:], src)
		for k := range n {
			c.writes[dst+uint64(k)]++
		}
		c.mu.Unlock()
	}()
	return completionFunc(func() error {
		<-comp.done
		l.mu.Lock()
		l.pending[i] = false
		l.mu.Unlock()
		return comp.err
	}), nil
}

func (l *fakeLane) Release(failed error) {
	l.checkThread("Release")
	for i, p := range l.pending {
		if p {
			l.c.misuse("lane %d released with buffer %d's copy not waited for", l.id, i)
		}
	}
	for _, b := range l.bufs {
		_ = unix.Munmap(b)
	}
	l.c.mu.Lock()
	l.c.released = append(l.c.released, failed)
	l.c.mu.Unlock()
	if l.c.sem != nil {
		<-l.c.sem
	}
}

type fakeCompletion struct {
	done chan struct{}
	err  error
}

type completionFunc func() error

func (f completionFunc) Wait() error { return f() }

// check asserts the invariants every Fill keeps, whatever its outcome.
func (c *fakeCopier) check(t *testing.T) {
	t.Helper()
	if w := c.wrong.Load(); w != nil {
		t.Fatal(w)
	}
	if n := c.outstanding.Load(); n != 0 {
		t.Fatalf("%d copies still running after Fill returned", n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.released) != c.acquired {
		t.Fatalf("%d lanes acquired, %d released", c.acquired, len(c.released))
	}
}

func writeFile(t *testing.T, size int, seed uint64) (string, []byte) {
	t.Helper()
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{byte(seed), 7}).Read(data)
	path := filepath.Join(t.TempDir(), fmt.Sprintf("f%d.bin", seed))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// checkStats asserts the counters add up for a fill of total bytes.
func checkStats(t *testing.T, st sdk.LoadStats, total uint64) {
	t.Helper()
	if st.Bytes != total {
		t.Fatalf("stats count %d bytes, want %d", st.Bytes, total)
	}
	if total > 0 && (st.Chunks == 0 || st.Readers == 0) {
		t.Fatalf("stats %+v: no chunks or readers", st)
	}
	sum := st.Read + st.BufferWait + st.Queue + st.CopyWait
	if limit := time.Duration(st.Readers) * st.Wall; sum > limit {
		t.Fatalf("reader time %v exceeds %d readers × wall %v", sum, st.Readers, st.Wall)
	}
}

func TestFillRandomExtentsEveryByteOnce(t *testing.T) {
	const fileSize = 3<<20 + 1234
	pathA, dataA := writeFile(t, fileSize, 1)
	pathB, dataB := writeFile(t, fileSize, 2)
	r := rand.New(rand.NewPCG(1, 2))
	for iter := range 24 {
		direct := []DirectMode{DirectNever, DirectAlways, DirectAuto}[iter%3]
		opts := Options{Readers: 1 + iter%4, Buffers: 1 + iter%3, BufferBytes: Alignment * (1 + r.IntN(40)), Direct: direct}
		const size = 8 << 20
		c := newFakeCopier(t, size)
		c.delay = time.Duration(r.IntN(200)) * time.Microsecond
		want := make([]byte, size)
		var extents []sdk.Extent
		var total uint64
		for dest := uint64(r.IntN(5000)); ; {
			length := uint64(1 + r.IntN(700_000))
			if r.IntN(4) == 0 {
				length = uint64(r.IntN(3)) // empty and tiny extents too
			}
			if dest+length > size {
				break
			}
			path, data := pathA, dataA
			if r.IntN(2) == 0 {
				path, data = pathB, dataB
			}
			off := uint64(r.IntN(fileSize - int(length) + 1))
			extents = append(extents, sdk.Extent{Path: path, FileOffset: off, Length: length, DestOffset: dest})
			copy(want[dest:], data[off:off+length])
			total += length
			dest += length
			if r.IntN(3) == 0 {
				dest += uint64(r.IntN(9000))
			}
		}
		var calls int
		var last uint64
		st, err := Fill(context.Background(), c, size, extents, func(done, tot uint64) {
			calls++
			if tot != total || done < last || done > total {
				t.Fatalf("progress(%d, %d) after %d, total %d", done, tot, last, total)
			}
			last = done
		}, opts)
		if err != nil {
			t.Fatalf("iteration %d (%+v): %v", iter, opts, err)
		}
		c.check(t)
		if !bytes.Equal(c.dst, want) {
			t.Fatalf("iteration %d (%+v): destination differs", iter, opts)
		}
		for i, e := range extents {
			for k := e.DestOffset; k < e.DestOffset+e.Length; k++ {
				if c.writes[k] != 1 {
					t.Fatalf("iteration %d: byte %d of extent %d written %d times", iter, k, i, c.writes[k])
				}
			}
		}
		var written uint64
		for _, w := range c.writes {
			written += uint64(w)
		}
		if written != total {
			t.Fatalf("iteration %d: %d bytes written, want %d", iter, written, total)
		}
		if total > 0 && uint64(calls) != st.Chunks {
			t.Fatalf("iteration %d: %d progress calls for %d chunks, want one each", iter, calls, st.Chunks)
		}
		if last != total || calls == 0 {
			t.Fatalf("iteration %d: last progress %d of %d after %d calls", iter, last, total, calls)
		}
		checkStats(t, st, total)
	}
}

func TestFillMergesContiguousExtentsAndKeepsOrderPerReader(t *testing.T) {
	path, data := writeFile(t, 1<<20, 3)
	c := newFakeCopier(t, 1<<20)
	// Three extents contiguous in file and destination, then a gap in
	// the destination, then one contiguous in the destination only.
	extents := []sdk.Extent{
		{Path: path, FileOffset: 100, Length: 1000, DestOffset: 0},
		{Path: path, FileOffset: 1100, Length: 2000, DestOffset: 1000},
		{Path: path, FileOffset: 3100, Length: 3000, DestOffset: 3000},
		{Path: path, FileOffset: 6100, Length: 500, DestOffset: 7000},
		{Path: path, FileOffset: 9000, Length: 500, DestOffset: 7500},
	}
	st, err := Fill(context.Background(), c, 1<<20, extents, nil, Options{Readers: 1, BufferBytes: 64 << 10, Direct: DirectNever})
	if err != nil {
		t.Fatal(err)
	}
	c.check(t)
	want := []copyRec{{1, 0, 6000}, {1, 7000, 500}, {1, 7500, 500}}
	if fmt.Sprint(c.copies) != fmt.Sprint(want) {
		t.Fatalf("copies %v, want %v (merged, in order)", c.copies, want)
	}
	if st.Chunks != 3 {
		t.Fatalf("stats count %d chunks, want 3", st.Chunks)
	}
	if !bytes.Equal(c.dst[:6000], data[100:6100]) || !bytes.Equal(c.dst[7500:8000], data[9000:9500]) {
		t.Fatal("bytes differ")
	}
}

func TestFillCancellationWaitsForQueuedCopies(t *testing.T) {
	path, _ := writeFile(t, 4<<20, 4)
	c := newFakeCopier(t, 4<<20)
	c.delay = 2 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	st, err := Fill(ctx, c, 4<<20, []sdk.Extent{{Path: path, Length: 4 << 20}}, func(done, total uint64) {
		once.Do(cancel)
	}, Options{Readers: 2, BufferBytes: Alignment, Direct: DirectNever})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Fill after cancel = %v, want context.Canceled", err)
	}
	c.check(t)
	if st.Bytes == 0 || st.Bytes >= 4<<20 {
		t.Fatalf("stats count %d bytes; want part of the file", st.Bytes)
	}
	var written uint64
	for _, w := range c.writes {
		written += uint64(w)
	}
	if written != st.Bytes {
		t.Fatalf("%d bytes landed, stats say %d", written, st.Bytes)
	}
}

func TestFillErrorsMidway(t *testing.T) {
	path, _ := writeFile(t, 2<<20, 5)
	extents := []sdk.Extent{{Path: path, Length: 2 << 20}}
	opts := Options{Readers: 3, BufferBytes: 16 << 10, Direct: DirectNever}
	says := func(text string) func(error) bool {
		return func(err error) bool { return err != nil && strings.Contains(err.Error(), text) }
	}
	is := func(target error) func(error) bool {
		return func(err error) bool { return errors.Is(err, target) }
	}
	for _, tc := range []struct {
		name   string
		inject func(c *fakeCopier, o *Options)
		want   string // the error Fill should return, in words
		ok     func(error) bool
		after  func(t *testing.T, c *fakeCopier) // further checks (nil: none)
	}{
		{name: "copy fails", want: "the injected copy failure", ok: says("injected copy failure"),
			inject: func(c *fakeCopier, _ *Options) { c.failCopy = 20 },
			after: func(t *testing.T, c *fakeCopier) {
				failed := 0
				for _, e := range c.released {
					if e != nil {
						failed++
					}
				}
				if failed != 1 {
					t.Fatalf("%d lanes released as failed, want 1: %v", failed, c.released)
				}
				if int(c.queued.Load()) >= 2<<20/(16<<10) {
					t.Fatalf("all %d copies queued despite the failure", c.queued.Load())
				}
			}},
		{name: "queue fails", want: "the injected queue failure", ok: says("injected queue failure"),
			inject: func(c *fakeCopier, _ *Options) { c.failQueue = 7 }},
		{name: "read fails", want: "EIO", ok: is(unix.EIO),
			inject: func(_ *fakeCopier, o *Options) {
				var reads atomic.Int64
				o.pread = func(fd int, p []byte, off int64) (int, error) {
					if reads.Add(1) == 9 {
						return 0, unix.EIO
					}
					return unix.Pread(fd, p, off)
				}
			}},
		{name: "file shrinks", want: "ErrInvalidArgument", ok: is(sdk.ErrInvalidArgument),
			inject: func(_ *fakeCopier, o *Options) {
				o.pread = func(fd int, p []byte, off int64) (int, error) {
					if off >= 1<<20 {
						return 0, nil
					}
					return unix.Pread(fd, p, off)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeCopier(t, 2<<20)
			o := opts
			tc.inject(c, &o)
			_, err := Fill(context.Background(), c, 2<<20, extents, nil, o)
			if !tc.ok(err) {
				t.Fatalf("Fill = %v, want %s", err, tc.want)
			}
			c.check(t)
			if tc.after != nil {
				tc.after(t, c)
			}
		})
	}
}

func TestFillRejectsBadExtentsBeforeCopying(t *testing.T) {
	path, _ := writeFile(t, 10_000, 6)
	for name, e := range map[string]sdk.Extent{
		"outside destination": {Path: path, Length: 100, DestOffset: 1000 - 99},
		"dest overflow":       {Path: path, Length: 100, DestOffset: ^uint64(0) - 10},
		"past file end":       {Path: path, FileOffset: 9_999, Length: 2},
		"file offset huge":    {Path: path, FileOffset: 1 << 63, Length: 1},
		"missing file":        {Path: filepath.Join(t.TempDir(), "missing"), Length: 1},
		"directory":           {Path: t.TempDir(), Length: 1},
	} {
		c := newFakeCopier(t, 1000)
		_, err := Fill(context.Background(), c, 1000, []sdk.Extent{e}, nil, Options{})
		if !errors.Is(err, sdk.ErrInvalidArgument) {
			t.Errorf("%s: Fill = %v, want ErrInvalidArgument", name, err)
		}
		if c.acquired != 0 {
			t.Errorf("%s: a lane was acquired", name)
		}
	}
	_, err := Fill(context.Background(), newFakeCopier(t, 1000), 1000, []sdk.Extent{{Path: filepath.Join(t.TempDir(), "missing"), Length: 1}}, nil, Options{})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v does not wrap fs.ErrNotExist", err)
	}
	if _, err := Fill(context.Background(), newFakeCopier(t, 10), 10, nil, nil, Options{BufferBytes: 1000}); err == nil {
		t.Error("a buffer size that is not a multiple of 4096 was accepted")
	}
}

// TestFillDirectFallbacks reads with O_DIRECT and makes the direct
// descriptor refuse: the fill must finish buffered, byte-equal.
func TestFillDirectFallbacks(t *testing.T) {
	path, data := writeFile(t, 1<<20+777, 7)
	for _, refusal := range []unix.Errno{unix.EINVAL, unix.EFAULT, unix.EOPNOTSUPP} {
		t.Run(refusal.Error(), func(t *testing.T) {
			var direct, buffered atomic.Int64
			opts := Options{Readers: 2, BufferBytes: 64 << 10, Direct: DirectAlways}
			opts.pread = func(fd int, p []byte, off int64) (int, error) {
				fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
				if err != nil {
					return 0, err
				}
				if fl&unix.O_DIRECT != 0 {
					direct.Add(1)
					return 0, refusal
				}
				buffered.Add(1)
				return unix.Pread(fd, p, off)
			}
			c := newFakeCopier(t, len(data))
			st, err := Fill(context.Background(), c, uint64(len(data)), []sdk.Extent{{Path: path, FileOffset: 5, Length: uint64(len(data)) - 5, DestOffset: 5}}, nil, opts)
			if err != nil {
				t.Fatal(err)
			}
			c.check(t)
			if direct.Load() == 0 {
				t.Skip("the filesystem of the test folder refused O_DIRECT at open; nothing to fall back from")
			}
			if !bytes.Equal(c.dst[5:], data[5:]) {
				t.Fatal("bytes differ after the fallback")
			}
			if buffered.Load() == 0 || st.DirectFiles != 0 || st.BufferedFiles != 1 {
				t.Fatalf("direct reads %d, buffered %d, stats %+v", direct.Load(), buffered.Load(), st)
			}
		})
	}
}

func TestFillDirectReadsByteEqual(t *testing.T) {
	path, data := writeFile(t, 2<<20+4093, 8)
	c := newFakeCopier(t, len(data)+100)
	st, err := Fill(context.Background(), c, uint64(len(data)+100), []sdk.Extent{{Path: path, FileOffset: 3, Length: uint64(len(data)) - 3, DestOffset: 50}}, nil,
		Options{Readers: 3, BufferBytes: 3 * Alignment, Direct: DirectAlways})
	if err != nil {
		t.Fatal(err)
	}
	c.check(t)
	t.Logf("stats %+v", st)
	if !bytes.Equal(c.dst[50:50+len(data)-3], data[3:]) {
		t.Fatal("bytes differ")
	}
}

func TestFillConcurrentFillsShareALimitedPool(t *testing.T) {
	path, data := writeFile(t, 1<<20, 9)
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	copiers := make([]*fakeCopier, 4)
	errs := make([]error, 4)
	for i := range copiers {
		c := newFakeCopier(t, 1<<20)
		c.sem = sem
		c.delay = 100 * time.Microsecond
		copiers[i] = c
		wg.Go(func() {
			_, errs[i] = Fill(context.Background(), c, 1<<20, []sdk.Extent{{Path: path, Length: 1 << 20}}, nil, Options{Readers: 4, BufferBytes: 16 << 10})
		})
	}
	wg.Wait()
	for i, c := range copiers {
		if errs[i] != nil {
			t.Fatalf("fill %d: %v", i, errs[i])
		}
		c.check(t)
		if !bytes.Equal(c.dst, data) {
			t.Fatalf("fill %d: bytes differ", i)
		}
	}
}

func TestMostlyResident(t *testing.T) {
	path, _ := writeFile(t, 8<<20, 10)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !mostlyResident(int(f.Fd()), 8<<20) {
		t.Fatal("a file just written is not resident")
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if mostlyResident(int(f.Fd()), 8<<20) {
		t.Skip("the page cache kept the file after FADV_DONTNEED (tmpfs?)")
	}
	if !mostlyResident(int(f.Fd()), 0) {
		t.Fatal("an empty file counts as not resident")
	}
}
