package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
)

// arenaSizes are the allocation sizes the daemon's plan of m asks of the
// backend (default plan options, as serve uses them).
func arenaSizes(m *Model) ([]uint64, error) {
	ck, err := safetensors.OpenCheckpoint(m.Dir)
	if err != nil {
		return nil, fmt.Errorf("plan of %s: %w", m.Dir, err)
	}
	pl, err := plan.Build(ck, plan.Options{})
	if err != nil {
		return nil, fmt.Errorf("plan of %s: %w", m.Dir, err)
	}
	sizes := make([]uint64, len(pl.Allocations))
	for i, a := range pl.Allocations {
		sizes[i] = a.Bytes
	}
	return sizes, nil
}

// mockAllocate times the mock backend's Allocate of sizes, in this process
// (the code the plugin runs) on a fresh world of its own: what the daemon's
// start pays for its arenas before the load. The allocations are freed
// (the backend closed) afterwards, outside the timing.
func mockAllocate(ctx context.Context, o Options, sizes []uint64) (took time.Duration, err error) {
	var total uint64
	for _, s := range sizes {
		total += s
	}
	memory := total + total/8 + (64 << 20)
	w, err := newWorld(o, "allocate", memory)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, w.Close()) }()
	b, err := newInProcMock(w, memory)
	if err != nil {
		return 0, fmt.Errorf("mock allocate: %w", err)
	}
	defer func() { err = errors.Join(err, b.Close()) }()
	start := time.Now()
	for _, s := range sizes {
		if _, _, err := b.Allocate(ctx, 0, s); err != nil {
			return 0, fmt.Errorf("mock allocate %d bytes: %w", s, err)
		}
	}
	return time.Since(start), nil
}
