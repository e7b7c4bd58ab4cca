package fill

import (
	"context"
	"fmt"
	"io"

	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/internal/mmap"
	"github.com/wcache/wcache/internal/parallel"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
	"github.com/wcache/wcache/sdk/names"
)

// copiedDigest is the content digest (sdk/filedigest) file f would have
// with the bytes of this daemon's allocations ids at pl's extents of f: a
// peer fill's copy, in file space, so that it can be compared with what
// the local file is known to hold (proveCopy). Every leaf lying whole in
// one extent is hashed by the backend where the bytes are (Digest of the
// arena range: only the sums cross the plugin boundary, as
// peer.ArenaDigest); the leaves at the edges of extents are assembled from
// f's header as the plan read it and the arena bytes around them (backend
// Read, under a leaf each). No byte of f's data is read from the file:
// the digest is the copy's, whole.
//
// The backend's Digest is SHA-256 of each range, the leaf hash of
// filedigest.SHA256Tree: the digest is in that algorithm (the same
// assumption peer.ArenaDigest makes). copyDigestIn gives it in another.
func copiedDigest(ctx context.Context, b sdk.Backend, f *safetensors.File, pl *plan.Plan, ids []sdk.AllocationID) (string, error) {
	size := f.Stamp.Size
	n := filedigest.LeafCount(size)
	sums := make([]filedigest.Sum, n)
	have := make([]bool, n)
	asm := headerLeaves(filedigest.SHA256Tree, f)
	var batches []digestBatch
	for ai, a := range pl.Allocations {
		var cur digestBatch
		for _, e := range a.Extents {
			if e.Path != f.Path {
				continue
			}
			from, to := int64(e.FileOffset), int64(e.FileOffset+e.Length)
			first := (from + filedigest.LeafBytes - 1) / filedigest.LeafBytes
			wholeFrom := min(first*filedigest.LeafBytes, to)
			wholeTo := wholeFrom
			for i := first; i < n; i++ {
				off, ln := filedigest.LeafRange(size, i)
				if off+ln > to {
					break
				}
				if len(cur.ranges) == rangeBatch {
					batches, cur = append(batches, cur), digestBatch{}
				}
				cur.arena = ai
				cur.ranges = append(cur.ranges, sdk.Range{Offset: e.DestOffset + uint64(off-from), Length: uint64(ln)})
				cur.leaves = append(cur.leaves, i)
				wholeTo = off + ln
			}
			for _, p := range [][2]int64{{from, wholeFrom}, {wholeTo, to}} {
				if p[1] <= p[0] {
					continue
				}
				buf, err := b.Read(ctx, ids[ai], e.DestOffset+uint64(p[0]-from), uint64(p[1]-p[0]))
				if err != nil {
					return "", fmt.Errorf("content of %s: read arena %d: %w", f.Path, ai+1, err)
				}
				if int64(len(buf)) != p[1]-p[0] {
					return "", fmt.Errorf("content of %s: read arena %d: %d of %d bytes", f.Path, ai+1, len(buf), p[1]-p[0])
				}
				asm.Write(p[0], buf)
			}
		}
		if len(cur.ranges) > 0 {
			batches = append(batches, cur)
		}
	}
	// The batches on digestStreams goroutines: the backend hashes several
	// ranges at once (each leaf index is written by one batch only).
	err := parallel.For(ctx, len(batches), digestStreams, func(_, k int) error {
		bt := batches[k]
		got, err := b.Digest(ctx, ids[bt.arena], bt.ranges)
		if err == nil && len(got) != len(bt.ranges) {
			err = fmt.Errorf("%d sums for %d ranges: protocol violation", len(got), len(bt.ranges))
		}
		if err != nil {
			return fmt.Errorf("content of %s: digest of arena %d: %w", f.Path, bt.arena+1, err)
		}
		for j, s := range got {
			sums[bt.leaves[j]], have[bt.leaves[j]] = s, true
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	for _, l := range asm.Leaves() {
		sums[l.Index], have[l.Index] = l.Sum, true
	}
	for i, ok := range have {
		if !ok {
			return "", fmt.Errorf("content of %s: leaf %d is not covered by the plan's extents", f.Path, i)
		}
	}
	return filedigest.SHA256Tree.Root(size, sums)
}

// digestBatch is one Digest call of copiedDigest: ranges of one arena, the
// file leaf each is.
type digestBatch struct {
	arena  int
	ranges []sdk.Range
	leaves []int64
}

// rangeBatch is how many 1 MiB ranges one Digest call of copiedDigest
// asks for, and digestStreams how many calls run at once.
const (
	rangeBatch    = 64
	digestStreams = 4
)

// copyDigestIn is the content digest in alg of file f with the bytes of
// this daemon's allocations ids: copiedDigest for filedigest.SHA256Tree
// (the backend hashes where the bytes are), else the bytes hashed here,
// read from the allocations' descriptors when the backend exports every
// one as a file (memfd), through the backend's Read otherwise.
func copyDigestIn(ctx context.Context, alg filedigest.Algorithm, b sdk.Backend, f *safetensors.File, pl *plan.Plan, ids []sdk.AllocationID) (string, error) {
	if alg == filedigest.SHA256Tree {
		return copiedDigest(ctx, b, f, pl, ids)
	}
	arenas, closeFiles := exportedReaders(ctx, b, ids)
	defer closeFiles()
	d, err := digestFromArenas(ctx, alg, f, pl, receivedBytes{arenas: arenas})
	if err != nil {
		return "", fmt.Errorf("content of %s: %w", f.Path, err)
	}
	return d, nil
}

// exportedReaders reads allocations ids from read-only mappings of their
// exports — a memfd's descriptor, a posix-shm file (names.KindPosixShm,
// Exact size) — when every one maps, so that hashing the copy costs no
// read system call and no byte through the plugin; else through the
// backend (backendReaders). close unmaps.
func exportedReaders(ctx context.Context, b sdk.Backend, ids []sdk.AllocationID) (readers []io.ReaderAt, close func()) {
	var maps [][]byte
	closeAll := func() {
		for _, m := range maps {
			_ = mmap.Unmap(m)
		}
	}
	for _, id := range ids {
		m, err := mapExport(ctx, b, id)
		if err != nil {
			closeAll()
			return backendReaders(ctx, b, ids), func() {}
		}
		maps = append(maps, m)
		readers = append(readers, mappedArena(m))
	}
	return readers, closeAll
}

// mapExport maps allocation id's export read-only.
func mapExport(ctx context.Context, b sdk.Backend, id sdk.AllocationID) ([]byte, error) {
	h, err := b.Export(ctx, id)
	if err != nil {
		return nil, err
	}
	defer closeHandleFiles([]sdk.Handle{h})
	switch {
	case h.File != nil:
		return mmap.FD(int(h.File.Fd()), h.Size, mmap.Read)
	case h.Kind == names.KindPosixShm:
		return mmap.Path(string(h.Data), h.Size, mmap.Read, mmap.Exact)
	}
	return nil, fmt.Errorf("allocation %d: a %s handle does not map here", id, h.Kind)
}

// backendReaders reads allocations ids through the backend (backendReader),
// for the plain SHA-256 of a hub blob (sha256FromArenas).
func backendReaders(ctx context.Context, b sdk.Backend, ids []sdk.AllocationID) []io.ReaderAt {
	out := make([]io.ReaderAt, len(ids))
	for i, id := range ids {
		out[i] = backendReader{ctx: ctx, b: b, id: id}
	}
	return out
}
