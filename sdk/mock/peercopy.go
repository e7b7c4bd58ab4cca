package mock

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/fill"
)

// PeerCopyChunk is the size of each copy of a peer copy (the unit of its
// progress and of the mock plugin's peer-copy fault knob).
const PeerCopyChunk = 4 << 20

// PeerCopyPath is the PeerCopyStats.Path of Memory's peer copies.
const PeerCopyPath = "memcpy"

var _ sdk.PeerCopier = (*Memory)(nil)

// PeerCopy imports req.Source (Import: a memfd handle, or a file handle of
// this backend's folder), allocates a new allocation of the bytes to copy
// on req.Ordinal (Allocate), copies them through sdk/fill.CopyDevice —
// each chunk a pwrite from the source's read-only mapping into the new
// allocation's file or memfd, a memcpy in the kernel — and unmaps the
// source. On any error the new allocation is freed too.
func (m *Memory) PeerCopy(ctx context.Context, req sdk.PeerCopyRequest, progress sdk.ProgressFunc) (sdk.PeerCopyResult, error) {
	return m.PeerCopyWith(ctx, req, progress, nil)
}

// PeerCopyWith is PeerCopy with start (nil: none) run once both
// allocations exist and before a byte is copied, as LoadWith's.
func (m *Memory) PeerCopyWith(ctx context.Context, req sdk.PeerCopyRequest, progress sdk.ProgressFunc, start LoadStart) (res sdk.PeerCopyResult, err error) {
	if err := m.checkOrdinal(req.Ordinal); err != nil {
		return sdk.PeerCopyResult{}, err
	}
	length := req.Length
	if length == 0 {
		length = req.Source.Size
	}
	if length == 0 || length > req.Source.Size {
		return sdk.PeerCopyResult{}, sdk.Errorf(sdk.ErrInvalidArgument, "peer copy of %d bytes from a %s handle of %d bytes", length, req.Source.Kind, req.Source.Size)
	}
	srcID, err := m.Import(ctx, req.Ordinal, req.Source)
	if err != nil {
		return sdk.PeerCopyResult{}, fmt.Errorf("peer copy: import the source: %w", err)
	}
	defer func() {
		if ferr := m.Free(context.WithoutCancel(ctx), srcID); ferr != nil && err == nil {
			err = fmt.Errorf("peer copy: unmap the source: %w", ferr)
		}
		if err != nil && res.ID != 0 {
			_ = m.Free(context.WithoutCancel(ctx), res.ID)
			res = sdk.PeerCopyResult{}
		}
	}()
	dstID, reserved, err := m.Allocate(ctx, req.Ordinal, length)
	if err != nil {
		return sdk.PeerCopyResult{}, fmt.Errorf("peer copy: %w", err)
	}
	res = sdk.PeerCopyResult{ID: dstID, Bytes: reserved}
	src, err := m.lookup(srcID)
	if err != nil {
		return res, err
	}
	dst, err := m.lookup(dstID)
	if err != nil {
		return res, err
	}
	if start != nil {
		if ctx, progress, err = start(ctx, req.Ordinal, progress); err != nil {
			return res, err
		}
	}
	if err := src.acquire(); err != nil {
		return res, err
	}
	defer src.mu.RUnlock()
	if err := dst.acquire(); err != nil {
		return res, err
	}
	defer dst.mu.RUnlock()
	ctx, cancel := m.untilClosed(ctx)
	defer cancel(nil)
	st, err := fill.CopyDevice(ctx, memcpyCopier{src: src, dst: dst}, length, fill.CopyOptions{ChunkBytes: PeerCopyChunk}, progress)
	st.Path = PeerCopyPath
	res.Stats = st
	if err != nil {
		return res, fmt.Errorf("peer copy into allocation %d: %w", dstID, err)
	}
	return res, nil
}

// memcpyCopier is the mock's device copy engine: every stream copies
// synchronously from the source's mapping into the destination's file.
type memcpyCopier struct{ src, dst *allocation }

func (c memcpyCopier) AcquireStream(ctx context.Context) (fill.Stream, error) {
	if ctx.Err() != nil {
		return nil, context.Cause(ctx) // the first failure, not just "canceled"
	}
	return c, nil
}

// CopyAsync maps the chunk's source pages in one madvise(MADV_POPULATE_READ)
// (Linux 5.14; best effort: an error leaves them to fault in during the
// copy, as before) rather than a page fault per 16 pages inside pwrite,
// then writes them into the destination.
func (c memcpyCopier) CopyAsync(off, n uint64) (fill.Completion, error) {
	p := c.src.data[off : off+n]
	_ = unix.Madvise(p, unix.MADV_POPULATE_READ)
	return fill.Done(writeChunk(c.dst.fd, p, off, c.dst.path)), nil
}

func (memcpyCopier) Release(error) {}
