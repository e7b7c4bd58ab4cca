// Package readback is the vendor-neutral half of a GPU backend's Read and
// Digest: range checks and hashing device memory while the next chunk is
// copied to the host. The CUDA and ROCm backends use it.
package readback

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/wcache/wcache/sdk"
)

// Chunk is the most bytes Digest copies to the host at once.
const Chunk = 8 << 20

// InRange reports whether [off, off+n) lies inside size bytes.
func InRange(off, n, size uint64) bool { return off <= size && n <= size-off }

// CheckRead validates a Read of [offset, +length) of a size-byte
// allocation: at most sdk.MaxReadBytes, inside it; ErrInvalidArgument
// otherwise.
func CheckRead(offset, length, size uint64) error {
	if length > sdk.MaxReadBytes {
		return sdk.Errorf(sdk.ErrInvalidArgument, "read %d bytes: at most %d per call", length, sdk.MaxReadBytes)
	}
	if !InRange(offset, length, size) {
		return sdk.Errorf(sdk.ErrInvalidArgument, "read [%d, +%d) of a %d-byte allocation", offset, length, size)
	}
	return nil
}

// CheckRanges validates Digest ranges of a size-byte allocation and
// returns the longest.
func CheckRanges(ranges []sdk.Range, size uint64) (uint64, error) {
	var largest uint64
	for i, r := range ranges {
		if !InRange(r.Offset, r.Length, size) {
			return 0, sdk.Errorf(sdk.ErrInvalidArgument, "digest range %d [%d, +%d) of a %d-byte allocation", i, r.Offset, r.Length, size)
		}
		largest = max(largest, r.Length)
	}
	return largest, nil
}

// Digest returns the SHA-256 of each range (already checked, see
// CheckRanges). copyAt starts copying len(buf) bytes at device offset off
// into buf and returns a channel that receives the copy's result; Digest
// keeps one copy in flight while it hashes the previous chunk of up to
// Chunk bytes.
func Digest(ctx context.Context, ranges []sdk.Range, largest uint64, copyAt func(buf []byte, off uint64) <-chan error) ([][32]byte, error) {
	chunk := min(largest, Chunk)
	bufs := [2][]byte{make([]byte, chunk), make([]byte, chunk)}
	out := make([][32]byte, len(ranges))
	type piece struct {
		buf  []byte
		done <-chan error
	}
	for i, r := range ranges {
		h := sha256.New()
		end := r.Offset + r.Length
		start := func(off uint64, k int) *piece {
			buf := bufs[k][:min(Chunk, end-off)]
			return &piece{buf: buf, done: copyAt(buf, off)}
		}
		var pending *piece
		if r.Length > 0 {
			pending = start(r.Offset, 0)
		}
		for off, k := r.Offset, 0; pending != nil; k ^= 1 {
			cur := pending
			if err := <-cur.done; err != nil {
				return nil, fmt.Errorf("range %d: %w", i, err)
			}
			off += uint64(len(cur.buf))
			pending = nil
			if off < end {
				pending = start(off, k^1)
			}
			h.Write(cur.buf)
		}
		h.Sum(out[i][:0])
	}
	return out, nil
}
