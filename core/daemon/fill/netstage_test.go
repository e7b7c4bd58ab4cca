package fill

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/core/daemon/daemontest/testworld"
	"github.com/wcache/wcache/core/daemon/fill/filltest"
	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
)

// backendDaemon is a Daemon over a backend alone: the allocation steps a
// daemon takes (core/daemon's allocate, export and free), without one.
type backendDaemon struct{ b sdk.Backend }

func (d backendDaemon) Backend() sdk.Backend { return d.b }

func (d backendDaemon) Allocate(ctx context.Context, pl *plan.Plan, ids *[]sdk.AllocationID) (uint64, error) {
	var reserved uint64
	for i, a := range pl.Allocations {
		id, got, err := d.b.Allocate(ctx, 0, a.Bytes)
		if err != nil {
			return reserved, fmt.Errorf("allocate arena %d: %w", i+1, err)
		}
		*ids = append(*ids, id)
		reserved += got
	}
	return reserved, nil
}

func (d backendDaemon) Export(ctx context.Context, ids []sdk.AllocationID) ([]sdk.Handle, error) {
	var out []sdk.Handle
	for _, id := range ids {
		h, err := d.b.Export(ctx, id)
		if err != nil {
			closeHandleFiles(out)
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

func (d backendDaemon) FreeAllocs(ids []sdk.AllocationID) {
	for _, id := range ids {
		_ = d.b.Free(context.Background(), id)
	}
}

// sinkRig is a stagedSink over a load job of the test world's model, its
// backend's handles not memfds and its Loads and allocations counted in s.
type sinkRig struct {
	s      filltest.StagedLoads
	job    *Job
	allocs []sdk.AllocationID
	sink   *stagedSink
	live   int64 // the backend's allocations before the sink's Prepare
}

// newSinkRig plans a load of a test world's model, makes a sink of the
// given window over it and Prepares the sink with the plan's arenas.
func newSinkRig(t *testing.T, window uint64) *sinkRig {
	t.Helper()
	w := testworld.New(t, testworld.Options{})
	mem, err := mock.NewMemory(mock.MemoryOptions{DeviceUUIDs: w.UUIDs, Memory: 1 << 30, Dir: w.Shm})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mem.Close() })
	r := &sinkRig{}
	b := mock.Wrap(mem)
	r.s.Inject(b)
	ck, pl := testworld.Plan(t, w.Model.Dir)
	var arenaBytes []uint64
	r.job = &Job{Checkpoint: ck, Plan: pl, Allocs: &r.allocs, ArenaBytes: &arenaBytes}
	r.live = r.s.Live.Load()
	r.sink = &stagedSink{d: backendDaemon{b}, log: hclog.NewNullLogger(), ck: ck, pl: pl, job: r.job, window: window}
	offer := peer.Offer{}
	for _, al := range pl.Allocations {
		offer.Arenas = append(offer.Arenas, peer.Arena{Size: al.Bytes})
	}
	if err := r.sink.Prepare(context.Background(), offer); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestStagedSinkAbortFreesEverything: a fetch aborted with windows still
// open (a peer that died mid-stream) closes their memfds and frees the
// arenas.
func TestStagedSinkAbortFreesEverything(t *testing.T) {
	r := newSinkRig(t, filltest.StageWindow)
	sink, s := r.sink, &r.s
	if err := sink.WriteAt(0, make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if n := filltest.OpenStagingMemfds(t, StageMemfdName); n != 1 {
		t.Fatalf("%d staging memfds open with one window begun, want 1", n)
	}
	if err := sink.Commit(context.Background()); err == nil {
		t.Fatal("commit with a window not received: no error")
	}
	sink.Abort(errors.New("peer died"))
	if n := filltest.OpenStagingMemfds(t, StageMemfdName); n != 0 {
		t.Errorf("%d staging memfds open after Abort", n)
	}
	if got := s.Live.Load(); got != r.live || r.allocs != nil {
		t.Errorf("after Abort the backend holds %d allocations (%d before), the job %v", got, r.live, r.allocs)
	}
}

// TestStagedSinkHoldsOneWindowInOrder: bytes arriving in order, on one
// stream, hold at most one window's memfd at a time (each window is
// loaded and closed by the write that completes it), never the arena.
func TestStagedSinkHoldsOneWindowInOrder(t *testing.T) {
	const window = 64 << 10
	r := newSinkRig(t, window)
	sink, job, s := r.sink, r.job, &r.s
	defer sink.Abort(errors.New("test over"))
	for ai, al := range job.Plan.Allocations {
		p := make([]byte, 12345) // pieces of no round size
		for off := uint64(0); off < al.Bytes; off += uint64(len(p)) {
			n := min(uint64(len(p)), al.Bytes-off)
			if err := sink.WriteAt(ai, p[:n], off); err != nil {
				t.Fatal(err)
			}
			if n := filltest.OpenStagingMemfds(t, StageMemfdName); n > 1 {
				t.Fatalf("arena %d at %d: %d staging memfds open, want at most 1", ai, off, n)
			}
		}
	}
	if err := sink.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sink.peak > window || len(s.Loads) < 2 {
		t.Errorf("peak staged %d bytes (window %d), %d loads", sink.peak, window, len(s.Loads))
	}
}
