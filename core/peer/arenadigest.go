package peer

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/wcache/wcache/internal/defaults"
	"github.com/wcache/wcache/internal/mmap"
	"github.com/wcache/wcache/internal/parallel"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
)

// digestBatch is how many leaves one Digest call asks for (32 bytes of
// answer each: 64 KiB a call).
const digestBatch = 2048

// ArenaDigest returns the content digest (sdk/filedigest, SHA256Tree: the
// backend contract's Digest is SHA-256) of the first size bytes of
// allocation id, with the leaves hashed by the backend where the bytes are
// (b.Digest of each 1 MiB range): nothing but the sums crosses the plugin
// boundary. A daemon computes its arenas' digests with it once,
// at load or publish, for the Offers its peer Server makes and to check
// an arena filled from a peer.
func ArenaDigest(ctx context.Context, b sdk.Backend, id sdk.AllocationID, size uint64) (string, error) {
	n := filedigest.LeafCount(int64(size))
	leaves := make([]filedigest.Sum, 0, n)
	for first := int64(0); first < n; first += digestBatch {
		ranges := make([]sdk.Range, 0, min(digestBatch, n-first))
		for i := first; i < min(first+digestBatch, n); i++ {
			off, length := filedigest.LeafRange(int64(size), i)
			ranges = append(ranges, sdk.Range{Offset: uint64(off), Length: uint64(length)})
		}
		sums, err := b.Digest(ctx, id, ranges)
		if err != nil {
			return "", fmt.Errorf("content digest of allocation %d: %w", id, err)
		}
		if len(sums) != len(ranges) {
			return "", fmt.Errorf("content digest of allocation %d: %d sums for %d ranges: protocol violation", id, len(sums), len(ranges))
		}
		leaves = append(leaves, sums...)
	}
	return filedigest.SHA256Tree.Root(int64(size), leaves)
}

// ArenaDigestFrom returns the content digest in alg of the first size bytes
// of r (an arena's memfd, which the daemon holds: no plugin call), its
// leaves hashed by workers goroutines (default min(8, CPUs)). An *os.File
// is mapped read-only and hashed in place (no read syscalls, no copy: the
// bytes are not "read" as /proc/<pid>/io counts them); another ReaderAt is
// read leaf by leaf. A daemon uses it for memfd arenas, where it may pick
// the faster BLAKE3Tree (filedigest.Default); the fetch checks each arena
// in its digest's algorithm.
func ArenaDigestFrom(ctx context.Context, r io.ReaderAt, size uint64, alg filedigest.Algorithm, workers int) (string, error) {
	n := filedigest.LeafCount(int64(size))
	defaults.Positive(&workers, min(8, runtime.NumCPU()))
	workers = int(min(int64(workers), max(n, 1)))
	var mapped []byte
	if f, ok := r.(*os.File); ok && size > 0 {
		st, err := f.Stat()
		if err != nil {
			return "", fmt.Errorf("content digest: %w", err)
		}
		if uint64(st.Size()) < size {
			return "", fmt.Errorf("content digest: %s has %d bytes, %d to digest: %w", f.Name(), st.Size(), size, io.ErrUnexpectedEOF)
		}
		if mapped, err = mmap.FD(int(f.Fd()), size, mmap.Read); err != nil {
			return "", fmt.Errorf("content digest: %w", err)
		}
		defer mmap.Unmap(mapped)
	}
	leaves := make([]filedigest.Sum, n)
	bufs := make([][]byte, workers)
	err := parallel.For(ctx, int(n), workers, func(w, i int) error {
		off, length := filedigest.LeafRange(int64(size), int64(i))
		if mapped != nil {
			leaves[i] = alg.Leaf(mapped[off : off+length])
			return nil
		}
		if bufs[w] == nil {
			bufs[w] = make([]byte, filedigest.LeafBytes)
		}
		if _, err := r.ReadAt(bufs[w][:length], off); err != nil {
			return fmt.Errorf("content digest: read at %d: %w", off, err)
		}
		leaves[i] = alg.Leaf(bufs[w][:length])
		return nil
	})
	if err != nil {
		return "", err
	}
	return alg.Root(int64(size), leaves)
}
