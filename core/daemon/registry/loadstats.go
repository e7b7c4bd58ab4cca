package registry

import (
	"time"

	"github.com/wcache/wcache/sdk"
)

// LoadStats measure the load.
type LoadStats struct {
	// Bytes is what was read from files; AllocatedBytes what was reserved
	// on the device (padding included).
	Bytes          uint64
	AllocatedBytes uint64
	Allocations    int
	Extents        int
	// Duration is the time of the Load calls (allocation and export
	// excluded): the fill rate is Bytes / Duration.
	Duration time.Duration
	// Phases of the start-up, measured by Start: open and plan the
	// checkpoint (config included), take the identity lock, Allocate and
	// Export every arena. Zero until Start measured them.
	Plan, Lock, Allocate, Export time.Duration
	// Fill sums the fill pipeline's counters over the arenas (zero when
	// the backend does not measure them; see sdk.LoadStats).
	Fill sdk.LoadStats
	// DigestLeaves counts the content-digest leaves of the files; the
	// fill hashed DigestLeavesFromFill of them as it passed the bytes, the
	// daemon read and hashed the rest (the headers', those at the edges of
	// arenas: all of them with a backend that does not hash).
	DigestLeaves, DigestLeavesFromFill int64
	// Adopted is the part of Bytes taken over as descriptors instead of
	// read from files (a takeover); Source says how the weights came:
	// "files", "takeover", or "" (empty, published).
	Adopted uint64
	Source  string
	// FilledFrom is where a file load's bytes came from: fill.FilledFromFiles,
	// or "peer …" (a peer fill; then FromPeer is Bytes and
	// Duration the copy, PeerVerify the check of the copy). FillFallback
	// is why a peer fill was tried and not used ("" when none was tried
	// or it worked). "" for a takeover or a publish.
	FilledFrom, FillFallback string
	FromPeer                 uint64
	PeerVerify               time.Duration
}

// BytesPerSecond is the fill rate of the load.
func (s LoadStats) BytesPerSecond() float64 {
	if s.Duration <= 0 {
		return 0
	}
	return float64(s.Bytes) / s.Duration.Seconds()
}
