package sdk

import (
	"context"
	"time"
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
}

// Add accumulates o into s: counts and durations add, Readers and Wall
// take the larger value (fills that ran side by side).
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
