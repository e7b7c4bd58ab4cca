package gpucore

import (
	"context"
	"errors"
	"fmt"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/fill"
)

// Paths of a peer copy (sdk.PeerCopyStats.Path).
const (
	// PathP2P: device to device, by the vendor's peer copy (the same
	// device, or two devices with a P2P path over NVLink or PCIe).
	PathP2P = "p2p"
	// PathStaged: through the destination device's pinned fill lanes,
	// the source read to the host on its own device first (two devices
	// without a P2P path).
	PathStaged = "staged"
)

// PeerDriver is the optional part of a Driver that copies from memory of
// another process, on this device or another one (Backend.PeerCopy). A
// Driver without it answers ErrUnsupported.
type PeerDriver interface {
	// PeerSupport returns nil when the vendor library has the peer-copy
	// entry points, else an error saying which one it lacks.
	PeerSupport() error
	// PointerDevice (thread) returns the ordinal of the device whose
	// memory p is; -1 for a device this process does not see.
	PointerDevice(p Ptr) (int, error)
	// CanAccessPeer (thread, dst's worker) reports whether device dst
	// reaches src's memory directly (a P2P path), enabling that access
	// where the vendor's API wants it enabled first.
	CanAccessPeer(dst, src int) (bool, error)
	// NewPeerStream makes dst's device current on the calling thread (a
	// goroutine locked to it) and returns a stream with depth event slots
	// copying to dst's device from src's.
	NewPeerStream(dst, src *Worker, depth int) (PeerStream, error)
}

// PeerStream is one stream of a device-to-device copy.
type PeerStream interface {
	// CopyAsync queues a copy of n bytes from src to dst and returns its
	// completion, an event recorded in slot (0 <= slot < depth); a slot
	// is used again only after the completion of its last copy was
	// waited for.
	CopyAsync(slot int, dst, src Ptr, n uint64) (fill.Completion, error)
	// Close waits for the stream, frees it and its events and leaves the
	// calling thread without a current device.
	Close() error
}

var _ sdk.PeerCopier = (*Backend)(nil)

// PeerCopy fills a new allocation on req.Ordinal from a sibling's exported
// memory (sdk.PeerCopier): it imports req.Source with Import (the path of
// clients' handles), asks the driver which device the memory is on, and
// copies through sdk/fill.CopyDevice:
//
//   - the same device, or a pair with a P2P path (PeerDriver.CanAccessPeer):
//     the vendor's peer copy on several streams (Path "p2p");
//   - a pair without one: the source is imported again on its own device,
//     each chunk read to a pinned staging buffer of the destination's fill
//     lanes on the source's worker and copied up on the lane's stream,
//     depth buffers per stream (Path "staged").
//
// The source is only read and is unmapped before PeerCopy returns. On any
// failure the new allocation is freed. A Driver without PeerDriver, or
// whose library lacks the entry points, is ErrUnsupported; a length past
// the source's size ErrInvalidArgument; memory on a device this process
// does not see ErrUnsupported.
func (b *Backend) PeerCopy(ctx context.Context, req sdk.PeerCopyRequest, progress sdk.ProgressFunc) (sdk.PeerCopyResult, error) {
	if err := b.Live(); err != nil {
		return sdk.PeerCopyResult{}, err
	}
	rt := b.rt
	pd, ok := rt.drv.(PeerDriver)
	if !ok {
		return sdk.PeerCopyResult{}, sdk.Errorf(sdk.ErrUnsupported, "peer copy: the %s backend cannot copy from a peer's memory", rt.drv.Name())
	}
	if err := pd.PeerSupport(); err != nil {
		return sdk.PeerCopyResult{}, sdk.Errorf(sdk.ErrUnsupported, "peer copy: %v", err)
	}
	if err := rt.CheckOrdinal(req.Ordinal); err != nil {
		return sdk.PeerCopyResult{}, err
	}
	length := req.Length
	if length == 0 {
		length = req.Source.Size
	}
	if length > req.Source.Size || length == 0 {
		return sdk.PeerCopyResult{}, sdk.Errorf(sdk.ErrInvalidArgument, "peer copy of %d bytes from a source of %d", length, req.Source.Size)
	}
	src, err := b.importHeld(ctx, req.Ordinal, req.Source)
	if err != nil {
		return sdk.PeerCopyResult{}, fmt.Errorf("peer copy: import the source: %w", err)
	}
	defer src.drop()
	dstW, err := rt.Worker(req.Ordinal)
	if err != nil {
		return sdk.PeerCopyResult{}, err
	}
	srcDev, p2p := -1, false
	err = dstW.Do(ctx, func() error {
		var err error
		if srcDev, err = pd.PointerDevice(src.m.ptr); err != nil || srcDev < 0 {
			return err
		}
		p2p = srcDev == req.Ordinal
		if !p2p {
			p2p, err = pd.CanAccessPeer(req.Ordinal, srcDev)
		}
		return err
	})
	if err != nil {
		return sdk.PeerCopyResult{}, fmt.Errorf("peer copy: locate the source: %w", err)
	}
	if srcDev < 0 || srcDev >= rt.drv.DeviceCount() {
		return sdk.PeerCopyResult{}, sdk.Errorf(sdk.ErrUnsupported, "peer copy: the source is memory of a device this process does not see")
	}
	srcW, err := rt.Worker(srcDev)
	if err != nil {
		return sdk.PeerCopyResult{}, err
	}
	srcPtr := src.m.ptr
	if !p2p {
		// The staged reads run on the source's device: map it there.
		onSrc, err := b.importHeld(ctx, srcDev, req.Source)
		if err != nil {
			return sdk.PeerCopyResult{}, fmt.Errorf("peer copy: import the source on its device %d: %w", srcDev, err)
		}
		defer onSrc.drop()
		srcPtr = onSrc.m.ptr
	}

	id, bytes, err := b.Allocate(ctx, req.Ordinal, length)
	if err != nil {
		return sdk.PeerCopyResult{}, fmt.Errorf("peer copy: %w", err)
	}
	st, err := b.copyPeer(ctx, pd, id, dstW, srcW, srcPtr, length, p2p, progress)
	if err != nil {
		if ferr := b.Free(context.Background(), id); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return sdk.PeerCopyResult{}, fmt.Errorf("peer copy from device %d to device %d: %w", srcDev, req.Ordinal, err)
	}
	return sdk.PeerCopyResult{ID: id, Bytes: bytes, Stats: st}, nil
}

// heldImport is an imported id with a reference to its memory.
type heldImport struct {
	b  *Backend
	id sdk.AllocationID
	m  *memory
}

// importHeld imports h on ordinal and holds the memory.
func (b *Backend) importHeld(ctx context.Context, ordinal int, h sdk.Handle) (heldImport, error) {
	id, err := b.Import(ctx, ordinal, h)
	if err != nil {
		return heldImport{}, err
	}
	m, err := b.hold(id)
	if err != nil {
		return heldImport{}, errors.Join(err, b.Free(context.Background(), id))
	}
	return heldImport{b: b, id: id, m: m}, nil
}

// drop releases the reference and frees the id (unmapping the memory with
// the last reference).
func (h heldImport) drop() {
	h.b.release(h.m)
	if err := h.b.Free(context.Background(), h.id); err != nil && !errors.Is(err, sdk.ErrNoSuchAllocation) {
		h.b.rt.log.Warn("peer copy: unmap the source", "error", err)
	}
}

// copyPeer runs fill.CopyDevice into allocation id, stopping when the
// Runtime closes (as a Load does).
func (b *Backend) copyPeer(ctx context.Context, pd PeerDriver, id sdk.AllocationID, dstW, srcW *Worker, src Ptr, length uint64, p2p bool, progress sdk.ProgressFunc) (sdk.PeerCopyStats, error) {
	m, err := b.hold(id)
	if err != nil {
		return sdk.PeerCopyStats{}, err
	}
	defer b.release(m)
	dstW.loadMu.RLock()
	defer dstW.loadMu.RUnlock()
	if srcW != dstW {
		// Close takes every worker's lock in turn: a second read lock
		// taken while it waits would deadlock, so fail instead.
		if !srcW.loadMu.TryRLock() {
			return sdk.PeerCopyStats{}, b.rt.errClosed
		}
		defer srcW.loadMu.RUnlock()
	}
	ctx, cancel := b.rt.untilClosed(ctx)
	defer cancel(nil)
	var (
		c    fill.DeviceCopier
		opts fill.CopyOptions
		path = PathP2P
	)
	if p2p {
		c = p2pCopier{pd: pd, dstW: dstW, srcW: srcW, dst: m.ptr, src: src, depth: fill.DefaultCopyDepth, log: b.rt.log}
	} else {
		fo := b.rt.drv.FillOptions()
		buffers, size := fo.Buffers, fo.BufferBytes
		if buffers == 0 {
			buffers = fill.DefaultBuffers
		}
		if size == 0 {
			size = fill.DefaultBufferBytes
		}
		c = stagedCopier{ctx: ctx, drv: b.rt.drv, lanes: b.rt.drv.Copier(dstW, m.ptr), srcW: srcW, src: src, buffers: buffers, size: size}
		opts = fill.CopyOptions{ChunkBytes: uint64(size), Depth: buffers}
		path = PathStaged
	}
	st, err := fill.CopyDevice(ctx, c, length, opts, progress)
	st.Path = path
	return st, err
}

// p2pCopier is CopyDevice's view of a device-to-device copy: streams of
// the vendor's peer copy (PeerDriver.NewPeerStream).
type p2pCopier struct {
	pd         PeerDriver
	dstW, srcW *Worker
	dst, src   Ptr
	depth      int
	log        hclog.Logger
}

func (c p2pCopier) AcquireStream(ctx context.Context) (fill.Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := c.pd.NewPeerStream(c.dstW, c.srcW, c.depth)
	if err != nil {
		return nil, err
	}
	return &p2pStream{c: c, s: s}, nil
}

type p2pStream struct {
	c    p2pCopier
	s    PeerStream
	next int
}

func (s *p2pStream) CopyAsync(off, n uint64) (fill.Completion, error) {
	slot := s.next % s.c.depth
	s.next++
	return s.s.CopyAsync(slot, s.c.dst+Ptr(off), s.c.src+Ptr(off), n)
}

func (s *p2pStream) Release(failed error) {
	if err := s.s.Close(); err != nil && failed == nil {
		s.c.log.Warn("peer copy: free a copy stream", "error", err)
	}
}

// stagedCopier is CopyDevice's view of a copy between devices without a
// P2P path: each stream is a fill lane of the destination (its pinned
// staging buffers and stream); a chunk is read into buffer i on the
// source's worker (Driver.MemcpyDtoH) and copied up asynchronously, so
// one buffer's upload overlaps the next one's read.
type stagedCopier struct {
	ctx           context.Context
	drv           Driver
	lanes         fill.Copier
	srcW          *Worker
	src           Ptr
	buffers, size int
}

func (c stagedCopier) AcquireStream(ctx context.Context) (fill.Stream, error) {
	l, err := c.lanes.Acquire(ctx, c.buffers, c.size)
	if err != nil {
		return nil, err
	}
	return &stagedStream{c: c, lane: l}, nil
}

type stagedStream struct {
	c    stagedCopier
	lane fill.Lane
	next int
}

func (s *stagedStream) CopyAsync(off, n uint64) (fill.Completion, error) {
	i := s.next % s.c.buffers
	s.next++
	buf := s.lane.Buffer(i)[:n]
	src := s.c.src + Ptr(off)
	if err := s.c.srcW.Do(s.c.ctx, func() error { return s.c.drv.MemcpyDtoH(buf, src) }); err != nil {
		return nil, fmt.Errorf("read [%d, +%d) of the source to the host: %w", off, n, err)
	}
	return s.lane.CopyAsync(i, 0, int(n), off)
}

func (s *stagedStream) Release(failed error) { s.lane.Release(failed) }
