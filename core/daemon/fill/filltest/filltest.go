// Package filltest holds the test helpers of the staged cross-node fill
// (fill's stagedSink), shared by fill's own tests and core/daemon's, which
// fill through a running daemon.
package filltest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
)

// StagedLoads records the Loads a backend got from staging memfds (a
// /proc/<pid>/fd path) and the allocations it holds.
type StagedLoads struct {
	mu    sync.Mutex
	Loads []sdk.Extent
	Live  atomic.Int64
	// FailAt is the staged Load (1-based) that fails; 0: none.
	FailAt int
}

// Inject wraps b's Load, Allocate and Free to record them in s.
func (s *StagedLoads) Inject(b *mock.Backend) {
	load, alloc, free := b.LoadFunc, b.AllocateFunc, b.FreeFunc
	b.LoadFunc = func(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
		if len(extents) > 0 && strings.HasPrefix(extents[0].Path, "/proc/") {
			s.mu.Lock()
			s.Loads = append(s.Loads, extents...)
			n := len(s.Loads)
			s.mu.Unlock()
			if n == s.FailAt {
				return sdk.Errorf(sdk.ErrOutOfMemory, "injected: the staged load %d fails", n)
			}
		}
		return load(ctx, id, extents, progress)
	}
	b.AllocateFunc = func(ctx context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
		id, got, err := alloc(ctx, ordinal, bytes)
		if err == nil {
			s.Live.Add(1)
		}
		return id, got, err
	}
	b.FreeFunc = func(ctx context.Context, id sdk.AllocationID) error {
		err := free(ctx, id)
		if err == nil {
			s.Live.Add(-1)
		}
		return err
	}
}

// OpenStagingMemfds counts this process's descriptors of staging memfds
// (named name: fill.StageMemfdName; filltest does not import fill, whose
// own tests use it).
func OpenStagingMemfds(t *testing.T, name string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && IsStagingMemfd(target, name) {
			n++
		}
	}
	return n
}

// IsStagingMemfd reports whether a descriptor's link target is a staging
// memfd named name ("/memfd:wcache-peer-stage (deleted)").
func IsStagingMemfd(target, name string) bool {
	return strings.Contains(target, "memfd:"+name)
}

// StageWindow is the window of the tests: a few windows per arena of the
// test world's model, of no round size, so that windows end inside leaves
// and tensors.
const StageWindow = 70<<10 + 123
