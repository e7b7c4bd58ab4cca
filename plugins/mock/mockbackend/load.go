package mockbackend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk"
)

// Load tuning: extents are cut into chunks of at most loadChunk bytes
// (the unit of progress, cancellation and the load fault knobs) that up to
// loadWorkers goroutines copy, each through its own loadBounce-byte buffer:
// pread from the checkpoint, pwrite into the allocation file. A buffer of
// 1 MiB stays in the CPU cache; 256 KiB (more system calls) and 4–8 MiB
// measured slower.
const (
	loadChunk   = 8 << 20
	loadWorkers = 4
	loadBounce  = 1 << 20
)

// chunk is one pread: length bytes at fileOffset of file into dest.
type chunk struct {
	file       int // index into the opened files
	fileOffset uint64
	dest       uint64
	length     uint64
}

// Load copies each extent from its file into the allocation file, several
// chunks in parallel, each with pread into a small reused buffer and
// pwrite into the allocation file at the extent's offset (the mapping
// sees the bytes: it is the same memory). Writing through the file rather
// than the mapping allocates each page without zero-filling it or taking
// a page fault, and a full folder is an error (ENOSPC), not a SIGBUS. It
// checks every extent before copying anything: the path must be absolute
// and name a regular file that holds the extent, and the extent must fit
// the allocation; otherwise ErrInvalidArgument. A folder that runs out of
// space (or memory) is ErrOutOfMemory; the bytes written so far stay
// allocated until Free. Progress is reported after each chunk from the
// calling goroutine. Cancelling ctx (or Close) stops it.
func (b *Backend) Load(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
	a, err := b.lookup(id)
	if err != nil {
		return err
	}
	if a.imported {
		return sdk.Errorf(sdk.ErrInvalidArgument, "load into allocation %d: it is a read-only imported mapping", id)
	}
	var total uint64
	for i, e := range extents {
		if err := a.checkRange(fmt.Sprintf("extent %d", i), e.DestOffset, e.Length); err != nil {
			return err
		}
		total += e.Length
	}
	files, byExtent, err := openExtentFiles(extents)
	if err != nil {
		return fmt.Errorf("load into allocation %d: %w", id, err)
	}
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()

	faults := b.faults(a.ordinal)
	if d := faults.LoadDelay; d > 0 {
		b.log.Debug("delaying load", "delay", d, "knob", EnvLoadDelay)
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return fmt.Errorf("load into allocation %d: %w", id, ctx.Err())
		case <-b.closing:
			return sdk.Errorf(sdk.ErrUnavailable, "mock backend is shutting down")
		}
	}

	if err := a.acquire(); err != nil {
		return err
	}
	defer a.mu.RUnlock()
	return b.copyChunks(ctx, a, faults, byExtent, extents, total, progress)
}

// openExtentFiles opens every distinct path once and checks that each
// extent lies inside its file. It returns the distinct files (to close)
// and the file of each extent.
func openExtentFiles(extents []sdk.Extent) (files, byExtent []*os.File, err error) {
	byPath := map[string]*os.File{}
	fail := func(err error) ([]*os.File, []*os.File, error) {
		for _, f := range files {
			_ = f.Close()
		}
		return nil, nil, err
	}
	byExtent = make([]*os.File, len(extents))
	for i, e := range extents {
		if !filepath.IsAbs(e.Path) {
			return fail(sdk.Errorf(sdk.ErrInvalidArgument, "extent %d: path %q is not absolute", i, e.Path))
		}
		f, ok := byPath[e.Path]
		if !ok {
			f, err = os.Open(e.Path)
			if err != nil {
				return fail(fmt.Errorf("extent %d: %w: %w", i, err, sdk.ErrInvalidArgument))
			}
			files = append(files, f)
			byPath[e.Path] = f
		}
		byExtent[i] = f
		fi, err := f.Stat()
		if err != nil {
			return fail(fmt.Errorf("extent %d: %w", i, err))
		}
		if !fi.Mode().IsRegular() {
			return fail(sdk.Errorf(sdk.ErrInvalidArgument, "extent %d: %s is not a regular file", i, e.Path))
		}
		size := uint64(fi.Size())
		if e.FileOffset > size || e.Length > size-e.FileOffset {
			return fail(sdk.Errorf(sdk.ErrInvalidArgument, "extent %d: [%d, +%d) lies past the end of %s (%d bytes)", i, e.FileOffset, e.Length, e.Path, size))
		}
	}
	return files, byExtent, nil
}

func (b *Backend) copyChunks(ctx context.Context, a *allocation, f Faults, files []*os.File, extents []sdk.Extent, total uint64, progress sdk.ProgressFunc) error {
	if f.FailLoadAfter == 0 {
		return fmt.Errorf("load into allocation %d: injected failure after 0 bytes by %s", a.id, EnvFailLoadAfter)
	}
	if f.CrashLoadAfter == 0 {
		b.crash(a.id, 0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-b.closing:
			cancel()
		case <-ctx.Done():
		}
	}()

	type result struct {
		n   uint64
		err error
	}
	work := make(chan chunk)
	results := make(chan result)
	workers := min(loadWorkers, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, loadBounce)
			for c := range work {
				err := copyChunk(files[c.file], extents[c.file].Path, a, c, buf)
				results <- result{n: c.length, err: err}
			}
		}()
	}
	// Feed chunks; stop feeding when ctx ends.
	go func() {
		defer close(work)
		for i, e := range extents {
			for off := uint64(0); off < e.Length; off += loadChunk {
				n := min(loadChunk, e.Length-off)
				select {
				case work <- chunk{file: i, fileOffset: e.FileOffset + off, dest: e.DestOffset + off, length: n}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	go func() {
		wg.Wait()
		close(results)
	}()

	// Collect results in this goroutine, which also reports progress and
	// applies the fault knobs. Every worker result must be drained before
	// returning so that no pwrite changes the allocation after Load
	// returns.
	var done uint64
	var firstErr error
	for r := range results {
		if firstErr != nil {
			continue
		}
		if r.err != nil {
			firstErr = fmt.Errorf("load into allocation %d: %w", a.id, r.err)
			cancel()
			continue
		}
		done += r.n
		if progress != nil {
			progress(done, total)
		}
		if f.CrashLoadAfter > 0 && done >= uint64(f.CrashLoadAfter) {
			b.crash(a.id, done)
		}
		if f.FailLoadAfter > 0 && done >= uint64(f.FailLoadAfter) {
			firstErr = fmt.Errorf("load into allocation %d: injected failure after %d bytes by %s", a.id, done, EnvFailLoadAfter)
			cancel()
		}
	}
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil && done < total {
		select {
		case <-b.closing:
			return sdk.Errorf(sdk.ErrUnavailable, "mock backend is shutting down")
		default:
		}
		return fmt.Errorf("load into allocation %d: %w", a.id, context.Cause(ctx))
	}
	return nil
}

// copyChunk copies chunk c from f (the checkpoint at path) into a's file
// through buf.
func copyChunk(f *os.File, path string, a *allocation, c chunk, buf []byte) error {
	for done := uint64(0); done < c.length; {
		n := min(uint64(len(buf)), c.length-done)
		if err := readChunk(f, buf[:n], c.fileOffset+done, path); err != nil {
			return err
		}
		if err := writeChunk(a.fd, buf[:n], c.dest+done, a.path); err != nil {
			return err
		}
		done += n
	}
	return nil
}

// writeChunk writes src to fd (the allocation file at path) at off,
// retrying short writes. A file system out of space or memory (ENOSPC,
// EDQUOT, ENOMEM: /dev/shm is full or the memory cgroup is at its limit)
// is ErrOutOfMemory; other failures are returned wrapped.
func writeChunk(fd int, src []byte, off uint64, path string) error {
	for len(src) > 0 {
		n, err := unix.Pwrite(fd, src, int64(off))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT), errors.Is(err, unix.ENOMEM):
			return sdk.Errorf(sdk.ErrOutOfMemory, "write %d bytes at %d of %s: %v (the shared-memory folder %s is full)",
				len(src), off, path, err, filepath.Dir(path))
		case err != nil:
			return fmt.Errorf("write %s at %d: %w", path, off, err)
		case n == 0:
			return fmt.Errorf("write %s at %d: no progress", path, off)
		}
		src = src[n:]
		off += uint64(n)
	}
	return nil
}

// readChunk fills dst from f at off, retrying short reads. A file that
// shrank under us is ErrInvalidArgument.
func readChunk(f *os.File, dst []byte, off uint64, path string) error {
	fd := int(f.Fd())
	for len(dst) > 0 {
		n, err := unix.Pread(fd, dst, int64(off))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s at %d: %w", path, off, err)
		}
		if n == 0 {
			return sdk.Errorf(sdk.ErrInvalidArgument, "read %s at %d: file shorter than the extent", path, off)
		}
		dst = dst[n:]
		off += uint64(n)
	}
	return nil
}

// crash simulates a backend crash for EnvCrashLoadAfter: it logs, then ends
// the process with CrashExitCode without releasing anything.
func (b *Backend) crash(id sdk.AllocationID, done uint64) {
	b.log.Error("injected crash during load", "allocation", id, "bytes_done", done, "knob", EnvCrashLoadAfter)
	b.exit(CrashExitCode)
}
