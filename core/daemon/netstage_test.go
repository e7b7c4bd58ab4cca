package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
)

// stagedLoads records the Loads a backend got from staging memfds (a
// /proc/<pid>/fd path) and the allocations it holds.
type stagedLoads struct {
	mu     sync.Mutex
	loads  []sdk.Extent
	live   atomic.Int64
	failAt int // the staged Load (1-based) that fails; 0: none
}

func (s *stagedLoads) inject(b *mock.Backend) {
	load, alloc, free := b.LoadFunc, b.AllocateFunc, b.FreeFunc
	b.LoadFunc = func(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
		if len(extents) > 0 && strings.HasPrefix(extents[0].Path, "/proc/") {
			s.mu.Lock()
			s.loads = append(s.loads, extents...)
			n := len(s.loads)
			s.mu.Unlock()
			if n == s.failAt {
				return sdk.Errorf(sdk.ErrOutOfMemory, "injected: the staged load %d fails", n)
			}
		}
		return load(ctx, id, extents, progress)
	}
	b.AllocateFunc = func(ctx context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
		id, got, err := alloc(ctx, ordinal, bytes)
		if err == nil {
			s.live.Add(1)
		}
		return id, got, err
	}
	b.FreeFunc = func(ctx context.Context, id sdk.AllocationID) error {
		err := free(ctx, id)
		if err == nil {
			s.live.Add(-1)
		}
		return err
	}
}

// openStagingMemfds counts this process's descriptors of staging memfds.
func openStagingMemfds(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.Contains(target, "memfd:"+stageMemfdName) {
			n++
		}
	}
	return n
}

// testStageWindow is the window of the tests: a few windows per arena of
// the fixture's model, of no round size, so that windows end inside
// leaves and tensors.
const testStageWindow = 70<<10 + 123

// TestFilledFromPeerIntoDeviceArenas: B's backend exports no memfd (what a
// GPU's device memory is to the daemon), so B stages the received bytes in
// memfds, window by window, and its backend Loads each from
// /proc/<pid>/fd/<n>: B is filled from A (A's arenas memfd or read
// through its backend), with A's content digests, an attach reads exactly
// the checkpoint's bytes, and no staging memfd is left open.
func TestFilledFromPeerIntoDeviceArenas(t *testing.T) {
	forEachPeerA(t, func(t *testing.T, f *fixture, a *running, creds *peer.Credentials) {
		f.memfd = false
		var s stagedLoads
		b := f.startWith(1, f.plugin(s.inject), func(o *Options) {
			otherNode(t, o)
			o.Peer = PeerOptions{Peers: []string{a.d.PeerAddr()}, Creds: creds, StageWindowBytes: testStageWindow}
		})
		info := checkFilledFromPeer(t, a, b)
		checkPeerContent(t, a, info)
		// Every arena byte came through a staged Load of at most one
		// window, and there was more than one window.
		var staged uint64
		for _, e := range s.loads {
			if e.Length == 0 || e.Length > testStageWindow || e.FileOffset != 0 {
				t.Errorf("staged load %+v: want one window from offset 0", e)
			}
			staged += e.Length
		}
		if len(s.loads) < 2 || staged < info.Load.Bytes || staged > info.Load.AllocatedBytes {
			t.Errorf("%d staged loads of %d bytes in all; B's load %+v", len(s.loads), staged, info.Load)
		}
		if n := openStagingMemfds(t); n != 0 {
			t.Errorf("%d staging memfds still open after the fill", n)
		}
		verifyAgainst(t, b.mustAttachHashing(t), f.model.Dir)
	})
}

// TestStagedLoadFailureReadsTheFiles: a staged Load that fails (after
// others succeeded) makes B free the arenas and the staging memory and
// read the files, saying why; an attach reads the checkpoint's bytes.
func TestStagedLoadFailureReadsTheFiles(t *testing.T) {
	f := newFixture(t)
	a, creds := peerPair(t, f, true)
	f.memfd = false
	s := stagedLoads{failAt: 2}
	b := f.startWith(1, f.plugin(s.inject), func(o *Options) {
		otherNode(t, o)
		o.Peer = PeerOptions{Peers: []string{a.d.PeerAddr()}, Creds: creds, StageWindowBytes: testStageWindow}
	})
	l := b.d.Info().Load
	if l.FilledFrom != FilledFromFiles || !strings.Contains(l.FillFallback, "staging memfd") || !strings.Contains(l.FillFallback, "injected") {
		t.Fatalf("B's load: filled from %q, fallback %q: want files after the staged load failed", l.FilledFrom, l.FillFallback)
	}
	if len(s.loads) < 2 {
		t.Fatalf("%d staged loads: the failure was not the one injected", len(s.loads))
	}
	if live := s.live.Load(); live != int64(l.Allocations) {
		t.Errorf("B's backend holds %d allocations, its generation %d: the fill's arenas were not freed", live, l.Allocations)
	}
	if n := openStagingMemfds(t); n != 0 {
		t.Errorf("%d staging memfds still open after the failed fill", n)
	}
	verifyAgainst(t, b.mustAttachHashing(t), f.model.Dir)
}

// sinkRig is a stagedSink over a daemon's prepared load job, its handles
// not memfds and its backend's Loads and allocations counted in s.
type sinkRig struct {
	s    stagedLoads
	job  *loadJob
	sink *stagedSink
	live int64 // the backend's allocations before the sink's Prepare
}

// newSinkRig starts a daemon, prepares a load of its model and a sink of
// the given window over the job, and Prepares the sink with the job's
// arenas.
func newSinkRig(t *testing.T, window uint64) *sinkRig {
	t.Helper()
	f := newFixture(t)
	f.memfd = false
	r := &sinkRig{}
	a := f.startWith(0, f.plugin(r.s.inject), nil)
	job, err := a.d.prepare(context.Background(), Source{Model: f.model.Dir, Config: a.d.Info().Config})
	if err != nil {
		t.Fatal(err)
	}
	r.job, r.live = job, r.s.live.Load()
	r.sink = &stagedSink{d: a.d, ck: job.ck, pl: job.pl, g: job.g, window: window}
	offer := peer.Offer{}
	for _, al := range job.pl.Allocations {
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
	r := newSinkRig(t, testStageWindow)
	sink, job, s := r.sink, r.job, &r.s
	if err := sink.WriteAt(0, make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if n := openStagingMemfds(t); n != 1 {
		t.Fatalf("%d staging memfds open with one window begun, want 1", n)
	}
	if err := sink.Commit(context.Background()); err == nil {
		t.Fatal("commit with a window not received: no error")
	}
	sink.Abort(errors.New("peer died"))
	if n := openStagingMemfds(t); n != 0 {
		t.Errorf("%d staging memfds open after Abort", n)
	}
	if got := s.live.Load(); got != r.live || job.g.allocs != nil {
		t.Errorf("after Abort the backend holds %d allocations (%d before), the generation %v", got, r.live, job.g.allocs)
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
	for ai, al := range job.pl.Allocations {
		p := make([]byte, 12345) // pieces of no round size
		for off := uint64(0); off < al.Bytes; off += uint64(len(p)) {
			n := min(uint64(len(p)), al.Bytes-off)
			if err := sink.WriteAt(ai, p[:n], off); err != nil {
				t.Fatal(err)
			}
			if n := openStagingMemfds(t); n > 1 {
				t.Fatalf("arena %d at %d: %d staging memfds open, want at most 1", ai, off, n)
			}
		}
	}
	if err := sink.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sink.peak > window || len(s.loads) < 2 {
		t.Errorf("peak staged %d bytes (window %d), %d loads", sink.peak, window, len(s.loads))
	}
}
