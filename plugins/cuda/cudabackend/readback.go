package cudabackend

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/sdk"
)

// digestChunk is the most bytes Digest copies to the host at once.
const digestChunk = 8 << 20

// inRange reports whether [off, off+n) lies inside size bytes.
func inRange(off, n, size uint64) bool {
	return off <= size && n <= size-off
}

// Read copies [offset, offset+length) of the allocation or mapping to the
// host (cuMemcpyDtoH_v2). length above sdk.MaxReadBytes or a range past
// the end is ErrInvalidArgument.
func (b *Backend) Read(ctx context.Context, id sdk.AllocationID, offset, length uint64) ([]byte, error) {
	m, err := b.hold(id)
	if err != nil {
		return nil, err
	}
	defer b.release(m)
	if length > sdk.MaxReadBytes {
		return nil, sdk.Errorf(sdk.ErrInvalidArgument, "read %d bytes: at most %d per call", length, sdk.MaxReadBytes)
	}
	if !inRange(offset, length, m.size) {
		return nil, sdk.Errorf(sdk.ErrInvalidArgument, "read [%d, +%d) of a %d-byte allocation", offset, length, m.size)
	}
	w, err := b.rt.worker(m.ordinal)
	if err != nil {
		return nil, err
	}
	out := make([]byte, length)
	if err := w.do(ctx, func() error { return b.rt.drv.MemcpyDtoH(out, m.ptr+driver.DevicePtr(offset)) }); err != nil {
		return nil, fmt.Errorf("read allocation %d [%d, +%d): %w", id, offset, length, err)
	}
	return out, nil
}

// Digest returns the SHA-256 of each range. Bytes are copied to the host
// in chunks of up to 8 MiB, the next chunk copying while the previous one
// is hashed. Any range past the end is ErrInvalidArgument, checked before
// anything is copied.
func (b *Backend) Digest(ctx context.Context, id sdk.AllocationID, ranges []sdk.Range) ([][32]byte, error) {
	m, err := b.hold(id)
	if err != nil {
		return nil, err
	}
	defer b.release(m)
	var largest uint64
	for i, r := range ranges {
		if !inRange(r.Offset, r.Length, m.size) {
			return nil, sdk.Errorf(sdk.ErrInvalidArgument, "digest range %d [%d, +%d) of a %d-byte allocation", i, r.Offset, r.Length, m.size)
		}
		largest = max(largest, r.Length)
	}
	w, err := b.rt.worker(m.ordinal)
	if err != nil {
		return nil, err
	}
	chunk := min(largest, digestChunk)
	bufs := [2][]byte{make([]byte, chunk), make([]byte, chunk)}
	out := make([][32]byte, len(ranges))
	for i, r := range ranges {
		h := sha256.New()
		type piece struct {
			buf  []byte
			done <-chan error
		}
		start := func(off uint64, k int) piece {
			n := min(digestChunk, r.Offset+r.Length-off)
			buf := bufs[k][:n]
			src := m.ptr + driver.DevicePtr(off)
			return piece{buf: buf, done: w.submit(ctx, func() error { return b.rt.drv.MemcpyDtoH(buf, src) })}
		}
		var pending *piece
		if r.Length > 0 {
			p := start(r.Offset, 0)
			pending = &p
		}
		for off, k := r.Offset, 0; pending != nil; k ^= 1 {
			cur := *pending
			if err := <-cur.done; err != nil {
				return nil, fmt.Errorf("digest allocation %d range %d: %w", id, i, err)
			}
			off += uint64(len(cur.buf))
			pending = nil
			if off < r.Offset+r.Length {
				p := start(off, k^1)
				pending = &p
			}
			h.Write(cur.buf)
		}
		h.Sum(out[i][:0])
	}
	return out, nil
}
