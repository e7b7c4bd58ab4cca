package sdk

import (
	"context"
	"time"

	"github.com/wcache/wcache/sdk/filedigest"
)

// LoadStats are the counters of one Load, as the fill pipeline (sdk/fill)
// measures them. Durations other than Wall are summed over the reader
// goroutines, so each may exceed Wall; together they are at most
// Readers × Wall. The zero value means "not measured" (a backend that does
// not implement StatsLoader, or a Load that copied nothing).
type LoadStats struct {
	// Bytes is how many bytes reached the destination.
	Bytes uint64
	// Chunks is how many copies were queued.
	Chunks uint64
	// Readers is how many reader goroutines the fill ran.
	Readers int
	// DirectFiles and BufferedFiles count the source files read with
	// O_DIRECT and with buffered reads (a file that fell back counts as
	// buffered).
	DirectFiles   int
	BufferedFiles int
	// Wall is the time from the start of the fill to its last copy done.
	Wall time.Duration
	// Read is the time spent in pread.
	Read time.Duration
	// BufferWait is the time readers waited for a staging buffer to be
	// free again (its previous copy to complete).
	BufferWait time.Duration
	// Queue is the time spent queueing copies (for a synchronous copier,
	// the copies themselves).
	Queue time.Duration
	// CopyWait is the time spent waiting, at the end, for the last copies.
	CopyWait time.Duration
	// Hash is the time spent hashing content-digest leaves (while the
	// copies ran).
	Hash time.Duration
	// Leaves are the content-digest leaves (sdk/filedigest) the fill
	// hashed as the bytes passed, one entry per source file; nil when the
	// backend does not hash. Leaves no chunk covered whole (the header's,
	// those at the edges of the extents) are missing: the daemon reads
	// and hashes those itself.
	Leaves []filedigest.FileLeaves
}

// IsZero reports whether s holds no counter and no leaf ("not measured").
func (s LoadStats) IsZero() bool {
	return s.Bytes == 0 && s.Chunks == 0 && s.Readers == 0 && s.DirectFiles == 0 && s.BufferedFiles == 0 &&
		s.Wall == 0 && s.Read == 0 && s.BufferWait == 0 && s.Queue == 0 && s.CopyWait == 0 && s.Hash == 0 && len(s.Leaves) == 0
}

// Add accumulates o into s: counts and durations add, Readers and Wall
// take the larger value (fills that ran side by side), Leaves append.
func (s *LoadStats) Add(o LoadStats) {
	s.Bytes += o.Bytes
	s.Chunks += o.Chunks
	s.Readers = max(s.Readers, o.Readers)
	s.DirectFiles += o.DirectFiles
	s.BufferedFiles += o.BufferedFiles
	s.Wall = max(s.Wall, o.Wall)
	s.Read += o.Read
	s.BufferWait += o.BufferWait
	s.Queue += o.Queue
	s.CopyWait += o.CopyWait
	s.Hash += o.Hash
	s.Leaves = append(s.Leaves, o.Leaves...)
}

// StatsLoader is a Backend whose Load also returns the fill counters.
// Backends built on sdk/fill implement it; the gRPC client always does
// (returning zero stats for a plugin that sends none).
type StatsLoader interface {
	// LoadWithStats is Load returning the counters of the fill. On error
	// the stats describe the work done before it.
	LoadWithStats(ctx context.Context, id AllocationID, extents []Extent, progress ProgressFunc) (LoadStats, error)
}

// LoadWithStats calls b.LoadWithStats when b is a StatsLoader and b.Load
// (with zero stats) otherwise.
func LoadWithStats(ctx context.Context, b Backend, id AllocationID, extents []Extent, progress ProgressFunc) (LoadStats, error) {
	if sl, ok := b.(StatsLoader); ok {
		return sl.LoadWithStats(ctx, id, extents, progress)
	}
	return LoadStats{}, b.Load(ctx, id, extents, progress)
}
