package fill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
)

// Fill copies every extent from its file to the destination of c, whose
// size is size bytes, and returns the fill's counters.
//
// Extents must lie inside the destination and inside their files; an
// extent that does not, or a file that cannot be opened, is
// sdk.ErrInvalidArgument and nothing is copied. A file that shrinks during
// the fill is sdk.ErrInvalidArgument too. Empty extents are skipped;
// extents contiguous in one file and in the destination are merged.
//
// Unless opts.NoDigest or ctx says no digest is wanted (sdk.WithoutDigest),
// the readers also hash what they read into
// content-digest leaves (sdk/filedigest), returned in LoadStats.Leaves
// (one entry per file, by path) when the fill succeeded.
//
// progress (may be nil) is called from the calling goroutine with the
// bytes whose copies have completed: once per completed chunk, the last
// time (done == total) only when the fill succeeded.
//
// The first error (a read, Acquire, CopyAsync or Completion error, or ctx
// ending) stops the fill: Fill returns it wrapped, after every copy
// already queued has completed or failed. The destination then holds an
// unspecified part of the data.
func Fill(ctx context.Context, c Copier, size uint64, extents []sdk.Extent, progress sdk.ProgressFunc, opts Options) (sdk.LoadStats, error) {
	start := time.Now()
	opts, err := opts.withDefaults()
	if err != nil {
		return sdk.LoadStats{}, err
	}
	opts.NoDigest = opts.NoDigest || !sdk.DigestWanted(ctx)
	merged, total, err := mergeExtents(extents, size)
	if err != nil {
		return sdk.LoadStats{}, err
	}
	files, err := openFiles(merged, opts)
	if err != nil {
		return sdk.LoadStats{}, err
	}
	defer func() {
		for _, f := range files {
			_ = f.close()
		}
	}()
	r := &run{copier: c, opts: opts, total: total, chunkDone: make(chan int, opts.Readers*opts.Buffers)}
	if total > 0 {
		r.run(ctx, merged, files, progress)
	}
	st := r.stats
	st.Wall = time.Since(start)
	st.Bytes = r.landed.Load()
	for _, f := range files {
		if f.isDirect() {
			st.DirectFiles++
		} else {
			st.BufferedFiles++
		}
	}
	if r.err != nil {
		return st, r.err
	}
	for _, f := range files {
		if f.digest != nil {
			st.Leaves = append(st.Leaves, filedigest.FileLeaves{Algorithm: f.digest.Algorithm(), Path: f.path, Size: f.size, Leaves: f.digest.Leaves()})
		}
	}
	slices.SortFunc(st.Leaves, func(a, b filedigest.FileLeaves) int { return strings.Compare(a.Path, b.Path) })
	if progress != nil {
		progress(total, total)
	}
	return st, nil
}

// mergeExtents validates extents against a destination of size bytes,
// drops empty ones, merges contiguous ones and returns the byte total.
func mergeExtents(in []sdk.Extent, size uint64) ([]sdk.Extent, uint64, error) {
	var out []sdk.Extent
	var total uint64
	for i, e := range in {
		if e.DestOffset > size || e.Length > size-e.DestOffset {
			return nil, 0, sdk.Errorf(sdk.ErrInvalidArgument, "extent %d: [%d, +%d) lies outside the %d-byte destination", i, e.DestOffset, e.Length, size)
		}
		if e.FileOffset > math.MaxInt64 || e.Length > math.MaxInt64-e.FileOffset {
			return nil, 0, sdk.Errorf(sdk.ErrInvalidArgument, "extent %d: file range [%d, +%d) overflows", i, e.FileOffset, e.Length)
		}
		if e.Length == 0 {
			continue
		}
		total += e.Length
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.Path == e.Path && last.FileOffset+last.Length == e.FileOffset && last.DestOffset+last.Length == e.DestOffset {
				last.Length += e.Length
				continue
			}
		}
		out = append(out, e)
	}
	return out, total, nil
}

// openFiles opens each distinct path once and checks every extent fits its
// file.
func openFiles(extents []sdk.Extent, opts Options) (map[string]*file, error) {
	files := map[string]*file{}
	fail := func(err error) (map[string]*file, error) {
		for _, f := range files {
			_ = f.close()
		}
		return nil, err
	}
	for i, e := range extents {
		f, ok := files[e.Path]
		if !ok {
			var err error
			if f, err = openFile(e.Path, opts.Direct, opts.pread); err != nil {
				return fail(fmt.Errorf("extent %d: %w: %w", i, err, sdk.ErrInvalidArgument))
			}
			if !opts.NoDigest {
				f.digest = filedigest.NewAssembler(f.size)
			}
			files[e.Path] = f
		}
		if e.FileOffset+e.Length > uint64(f.size) {
			return fail(sdk.Errorf(sdk.ErrInvalidArgument, "extent %d: [%d, +%d) runs past the end of %s (%d bytes)", i, e.FileOffset, e.Length, e.Path, f.size))
		}
	}
	return files, nil
}

// job is one chunk of one file.
type job struct {
	f *file
	c Chunk
}

// run is the state of one Fill while its readers work.
type run struct {
	copier Copier
	opts   Options
	total  uint64
	landed atomic.Uint64 // bytes whose copies completed, as reported
	// chunkDone receives the size of each chunk whose copy completed;
	// its buffer (Readers × Buffers) is enough that readers never wait
	// on the Fill goroutine for long.
	chunkDone chan int

	// hashNs sums the hashing goroutines' time (LoadStats.Hash).
	hashNs atomic.Int64

	mu    sync.Mutex
	err   error // first error
	stats sdk.LoadStats
}

func (r *run) run(ctx context.Context, extents []sdk.Extent, files map[string]*file, progress sdk.ProgressFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan job)
	// fed ends when every chunk has been handed out (or the fill stops):
	// readers still waiting for a lane then give up.
	fed, feedDone := context.WithCancel(ctx)
	go func() {
		defer feedDone()
		defer close(jobs)
		for _, e := range extents {
			f := files[e.Path]
			for _, c := range Plan(e.FileOffset, e.Length, e.DestOffset, r.opts.BufferBytes, f.alignment()) {
				select {
				case jobs <- job{f: f, c: c}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	chunks := (r.total + uint64(r.opts.BufferBytes) - 1) / uint64(r.opts.BufferBytes)
	readers := int(min(uint64(r.opts.Readers), chunks+uint64(len(extents))))
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() { r.reader(ctx, fed, cancel, jobs) })
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	// Report each landed chunk; the last (done == total) is reported by
	// Fill once it knows the fill succeeded.
	report := func(n int) {
		if done := r.landed.Add(uint64(n)); progress != nil && done != r.total {
			progress(done, r.total)
		}
	}
	for {
		select {
		case n := <-r.chunkDone:
			report(n)
			continue
		case <-finished:
		}
		break
	}
	for {
		select {
		case n := <-r.chunkDone:
			report(n)
			continue
		default:
		}
		break
	}
	r.stats.Readers = readers
	r.stats.Hash = time.Duration(r.hashNs.Load())
	if r.err == nil && r.landed.Load() != r.total {
		// Every reader ended without an error of its own: ctx ended.
		r.err = fmt.Errorf("fill stopped after %d of %d bytes: %w", r.landed.Load(), r.total, context.Cause(ctx))
	}
}

// fail records the first error and stops the fill.
func (r *run) fail(cancel context.CancelCauseFunc, err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	cancel(err)
}

// hash hashes the chunk j just read into buf on a goroutine of its own,
// while the copy out of buf runs (both only read it), and returns a
// Completion that waits for both: the reader reads into its other buffers
// meanwhile, so a fill hashes on up to Readers × Buffers cores and the
// hash costs time only where it is slower than the read or the copy.
func (r *run) hash(j job, buf []byte, copied Completion) Completion {
	hashed := make(chan struct{})
	off, p := int64(j.c.ReadOffset)+int64(j.c.Skip), buf[j.c.Skip:j.c.Skip+j.c.Len]
	go func() {
		defer close(hashed)
		t := time.Now()
		j.f.digest.Write(off, p)
		r.hashNs.Add(int64(time.Since(t)))
	}()
	return hashedCompletion{copied: copied, hashed: hashed}
}

// hashedCompletion is a chunk's copy and its hash.
type hashedCompletion struct {
	copied Completion
	hashed <-chan struct{}
}

func (c hashedCompletion) Wait() error {
	err := c.copied.Wait()
	<-c.hashed
	return err
}

// land hands the size of a chunk whose copy completed to Fill's
// goroutine, which counts it and reports progress.
func (r *run) land(n int) { r.chunkDone <- n }

// reader is one reader goroutine: it holds a lane, locked to its OS
// thread, and cycles through the lane's buffers.
func (r *run) reader(ctx, fed context.Context, cancel context.CancelCauseFunc, jobs <-chan job) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lane, err := r.copier.Acquire(fed, r.opts.Buffers, r.opts.BufferBytes)
	if err != nil {
		// Once fed has ended (every chunk handed out, or the fill
		// stopped), an error is only this reader giving up waiting.
		if fed.Err() == nil {
			r.fail(cancel, fmt.Errorf("acquire a staging lane: %w", err))
		}
		return
	}
	var st sdk.LoadStats
	pending := make([]Completion, r.opts.Buffers)
	pendingLen := make([]int, r.opts.Buffers)
	var laneErr error
	wait := func(k int, counter *time.Duration) {
		if pending[k] == nil {
			return
		}
		t := time.Now()
		err := pending[k].Wait()
		*counter += time.Since(t)
		pending[k] = nil
		if err != nil {
			if laneErr == nil {
				laneErr = err
			}
			r.fail(cancel, fmt.Errorf("copy of %d bytes: %w", pendingLen[k], err))
			return
		}
		r.land(pendingLen[k])
	}
	k := 0
loop:
	for laneErr == nil {
		var j job
		select {
		case <-ctx.Done():
			break loop
		case jj, ok := <-jobs:
			if !ok {
				break loop
			}
			j = jj
		}
		wait(k, &st.BufferWait)
		if laneErr != nil {
			break
		}
		buf := lane.Buffer(k)
		t := time.Now()
		err := j.f.readChunk(buf, j.c)
		st.Read += time.Since(t)
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				// The file shrank after it was checked.
				err = fmt.Errorf("%w: %w", err, sdk.ErrInvalidArgument)
			}
			r.fail(cancel, err)
			break
		}
		t = time.Now()
		comp, err := lane.CopyAsync(k, j.c.Skip, j.c.Len, j.c.Dest)
		st.Queue += time.Since(t)
		if err != nil {
			laneErr = err
			r.fail(cancel, fmt.Errorf("queue a copy of %d bytes to offset %d: %w", j.c.Len, j.c.Dest, err))
			break
		}
		st.Chunks++
		if j.f.digest != nil {
			comp = r.hash(j, buf, comp)
		}
		pending[k], pendingLen[k] = comp, j.c.Len
		k = (k + 1) % len(pending)
	}
	// Every queued copy completes (or fails) before the lane goes back.
	for i := range pending {
		wait((k+i)%len(pending), &st.CopyWait)
	}
	lane.Release(laneErr)
	r.mu.Lock()
	r.stats.Chunks += st.Chunks
	r.stats.Read += st.Read
	r.stats.BufferWait += st.BufferWait
	r.stats.Queue += st.Queue
	r.stats.CopyWait += st.CopyWait
	r.mu.Unlock()
}
