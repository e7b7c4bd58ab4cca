package mock

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/fill"
)

// LoadChunk is the size of each staging buffer of Load's fill, and so of
// each chunk (the unit of progress and of the mock plugin's load fault
// knobs). A buffer of 1 MiB stays in the CPU cache; 256 KiB (more system
// calls) and 4–8 MiB measured slower.
const LoadChunk = 1 << 20

// LoadStart is LoadWith's hook for a backend built on Memory (the mock
// plugin's fault knobs). It runs once the load's arguments are checked and
// before a byte is copied, with the allocation's device; its error ends
// the load as it is. The context and progress func it returns replace the
// call's (progress may be nil); cancelling that context with a cause
// fails the load with the cause.
type LoadStart func(ctx context.Context, ordinal int, progress sdk.ProgressFunc) (context.Context, sdk.ProgressFunc, error)

// Load copies each extent from its file into the allocation through the
// shared fill pipeline (sdk/fill): reader goroutines pread chunks of the
// checkpoint into 1 MiB buffers, and Memory's "copy" is a pwrite of the
// buffer into the allocation's file or memfd at the extent's offset (the
// mapping sees the bytes: it is the same memory). Writing through the
// file rather than the mapping allocates each page without zero-filling
// it or taking a page fault, and a full folder is an error (ENOSPC), not
// a SIGBUS. It checks every extent before copying anything: the path must
// be absolute and name a regular file that holds the extent, and the
// extent must fit the allocation; otherwise ErrInvalidArgument, as is
// loading into an imported file. A folder that runs out of space (or
// memory) is ErrOutOfMemory; the bytes written so far stay allocated
// until Free. Progress is reported from the calling goroutine. Cancelling
// ctx (or Close) stops it.
func (m *Memory) Load(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
	_, err := m.LoadWith(ctx, id, extents, progress, nil)
	return err
}

// LoadWithStats is Load returning the fill pipeline's counters.
func (m *Memory) LoadWithStats(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) (sdk.LoadStats, error) {
	return m.LoadWith(ctx, id, extents, progress, nil)
}

// LoadWith is LoadWithStats with start (nil: none) run before the copy.
func (m *Memory) LoadWith(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc, start LoadStart) (sdk.LoadStats, error) {
	a, err := m.lookup(id)
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
	if start != nil {
		if ctx, progress, err = start(ctx, a.ordinal, progress); err != nil {
			return sdk.LoadStats{}, err
		}
	}
	if err := a.acquire(); err != nil {
		return sdk.LoadStats{}, err
	}
	defer a.mu.RUnlock()
	ctx, cancel := m.untilClosed(ctx)
	defer cancel(nil)
	st, err := fill.Fill(ctx, fill.WriterAt{W: allocationWriter{a}}, a.size, extents, progress, fill.Options{Buffers: 1, BufferBytes: LoadChunk})
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
