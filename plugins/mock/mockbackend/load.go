package mockbackend

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/fill"
)

// loadBuffer is the size of each staging buffer of the mock's fill, and
// so of each chunk (the unit of progress and of the load fault knobs). A
// buffer of 1 MiB stays in the CPU cache; 256 KiB (more system calls) and
// 4–8 MiB measured slower.
const loadBuffer = 1 << 20

// Load copies each extent from its file into the allocation file through
// the shared fill pipeline (sdk/fill): reader goroutines pread chunks of
// the checkpoint into 1 MiB buffers, and the mock's "copy" is a pwrite of
// the buffer into the allocation file at the extent's offset (the mapping
// sees the bytes: it is the same memory). Writing through the file rather
// than the mapping allocates each page without zero-filling it or taking
// a page fault, and a full folder is an error (ENOSPC), not a SIGBUS. It
// checks every extent before copying anything: the path must be absolute
// and name a regular file that holds the extent, and the extent must fit
// the allocation; otherwise ErrInvalidArgument. A folder that runs out of
// space (or memory) is ErrOutOfMemory; the bytes written so far stay
// allocated until Free. Progress is reported from the calling goroutine.
// Cancelling ctx (or Close) stops it.
func (b *Backend) Load(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
	_, err := b.LoadWithStats(ctx, id, extents, progress)
	return err
}

// LoadWithStats is Load returning the fill pipeline's counters.
func (b *Backend) LoadWithStats(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) (sdk.LoadStats, error) {
	a, err := b.lookup(id)
	if err != nil {
		return sdk.LoadStats{}, err
	}
	if a.imported {
		return sdk.LoadStats{}, sdk.Errorf(sdk.ErrInvalidArgument, "load into allocation %d: it is a read-only imported mapping", id)
	}
	for i, e := range extents {
		if !filepath.IsAbs(e.Path) {
			return sdk.LoadStats{}, sdk.Errorf(sdk.ErrInvalidArgument, "load into allocation %d: extent %d: path %q is not absolute", id, i, e.Path)
		}
	}
	faults := b.faults(a.ordinal)
	if d := faults.LoadDelay; d > 0 {
		b.log.Debug("delaying load", "delay", d, "knob", EnvLoadDelay)
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return sdk.LoadStats{}, fmt.Errorf("load into allocation %d: %w", id, ctx.Err())
		case <-b.closing:
			return sdk.LoadStats{}, sdk.Errorf(sdk.ErrUnavailable, "mock backend is shutting down")
		}
	}
	if err := a.acquire(); err != nil {
		return sdk.LoadStats{}, err
	}
	defer a.mu.RUnlock()
	if faults.FailLoadAfter == 0 {
		return sdk.LoadStats{}, fmt.Errorf("load into allocation %d: injected failure after 0 bytes by %s", a.id, EnvFailLoadAfter)
	}
	if faults.CrashLoadAfter == 0 {
		b.crash(a.id, 0)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-b.closing:
			cancel(sdk.Errorf(sdk.ErrUnavailable, "mock backend is shutting down"))
		case <-ctx.Done():
		}
	}()
	var injected error // set by report, on the calling goroutine
	report := func(done, total uint64) {
		if progress != nil {
			progress(done, total)
		}
		if faults.CrashLoadAfter > 0 && done >= uint64(faults.CrashLoadAfter) {
			b.crash(a.id, done)
		}
		if faults.FailLoadAfter > 0 && done >= uint64(faults.FailLoadAfter) && injected == nil {
			injected = fmt.Errorf("injected failure after %d bytes by %s", done, EnvFailLoadAfter)
			cancel(injected)
		}
	}
	st, err := fill.Fill(ctx, fill.WriterAt{W: allocationWriter{a}}, a.size, extents, report, fill.Options{Buffers: 1, BufferBytes: loadBuffer})
	if err == nil && injected != nil {
		// The knob fired on the last chunk: the fill had nothing left
		// to stop, but the load still fails.
		err = injected
	}
	if err != nil {
		return st, fmt.Errorf("load into allocation %d: %w", id, err)
	}
	return st, nil
}

// allocationWriter is the fill pipeline's destination for one allocation
// (sdk/fill's WriterAt copier): a synchronous pwrite into its file, with
// writeChunk's retries and out-of-memory mapping.
type allocationWriter struct{ a *allocation }

func (w allocationWriter) WriteAt(p []byte, off int64) (int, error) {
	if err := writeChunk(w.a.fd, p, uint64(off), w.a.path); err != nil {
		return 0, err
	}
	return len(p), nil
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

// crash simulates a backend crash for EnvCrashLoadAfter: it logs, then ends
// the process with CrashExitCode without releasing anything.
func (b *Backend) crash(id sdk.AllocationID, done uint64) {
	b.log.Error("injected crash during load", "allocation", id, "bytes_done", done, "knob", EnvCrashLoadAfter)
	b.exit(CrashExitCode)
}
