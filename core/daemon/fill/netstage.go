package fill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/internal/memfdseal"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
)

// This file is the cross-node fill's sink for arenas the daemon cannot
// write itself (device memory: CUDA, ROCm, posix-shm): the backend contract
// has no host-to-device write, only Load, which reads extents of files by
// path inside the plugin through its own fill pipeline (sdk/fill). So the
// received bytes are staged, one window of an arena at a time, in a memfd
// of the daemon, and the plugin Loads the window from it by the path
// /proc/<daemon pid>/fd/<n>: the plugin is the daemon's child, of the same
// user, and opening that path reopens the memfd (a regular file: sdk/fill's
// open, stat and O_DIRECT fallback take it as any file). No contract
// change: a plugin of any version loads it. The window's memfd is sealed
// against writes before the Load (the bytes the plugin reads are the ones
// hashed) and closed when the Load returns.

// DefaultStageWindowBytes is the size of one staging window of a
// cross-node fill into device arenas: the host memory a window holds from
// its first received byte until the plugin loaded it, and the unit of one
// backend Load. A multiple of peer.DefaultChunkBytes, so that no chunk
// straddles two windows.
const DefaultStageWindowBytes uint64 = 64 << 20

// StageMemfdName names the staging memfds ("/memfd:wcache-peer-stage" in
// /proc/<pid>/fd and maps).
const StageMemfdName = "wcache-peer-stage"

// stagedSink is a peer.Sink writing the offer into device arenas through
// staging memfds that the backend Loads. Every arena is cut into windows
// of window bytes; a window's memfd is created by the first byte written
// into it, and once every byte of it arrived, the stream that wrote the
// last one seals it, Loads it into the arena at the window's offset and
// closes it (that stream reads nothing meanwhile). The fetch hands chunks
// out in order, each stream holding one at a time, so a window is held
// only while a stream is loading it, a stream's chunk lies in it, or it
// holds the last chunk handed out: at most streams + 1 windows at once
// when the window is a multiple of the chunk (2 × streams + 1 otherwise,
// a chunk then spanning two), whatever the model's size — with the
// defaults (4 streams, 64 MiB) 320 MiB, plus the streams' 16 MiB read
// buffers. Each file's content-digest leaves are
// collected from the bytes as they arrive (proveContent needs no second
// pass); the plain SHA-256 a hub blob name is checked against reads the
// arenas back through the backend (readers).
//
// Nothing is served before Commit: a window loaded from bytes that later
// fail their arena's digest is freed with the arenas (Abort, or the
// filler's caller).
type stagedSink struct {
	d      Daemon
	log    hclog.Logger
	ck     *safetensors.Checkpoint
	pl     *plan.Plan
	job    *Job
	window uint64

	ctx      context.Context
	reserved uint64
	leaves   map[string]*filedigest.Assembler

	mu      sync.Mutex
	open    map[windowKey]*stageWindow
	staged  uint64 // host bytes held by open windows
	peak    uint64 // most host bytes held at once
	loaded  uint64 // bytes loaded into the arenas
	windows int    // windows loaded
	fill    sdk.LoadStats
}

// windowKey names a window: its arena and its index in the arena.
type windowKey struct{ arena, index int }

// stageWindow is one window being received: [off, off+size) of arena.
type stageWindow struct {
	off, size uint64
	file      *os.File
	written   uint64 // under stagedSink.mu
}

// Prepare refuses an offer whose arenas are not the plan's, then allocates
// every arena (not exported: the load exports them once they hold the
// checked bytes).
func (s *stagedSink) Prepare(ctx context.Context, offer peer.Offer) error {
	if err := checkOfferLayout(s.pl, offer); err != nil {
		return err
	}
	s.ctx = ctx
	s.open = map[windowKey]*stageWindow{}
	s.leaves = map[string]*filedigest.Assembler{}
	for _, f := range s.ck.Files {
		s.leaves[f.Path] = headerLeaves(filedigest.Default, f)
	}
	*s.job.ArenaBytes = s.pl.ArenaBytes()
	reserved, err := s.d.Allocate(ctx, s.pl, s.job.Allocs)
	s.reserved = reserved
	return err
}

// WriteAt stages p at off of arena, window by window, collects its files'
// leaves, and loads every window it completes.
func (s *stagedSink) WriteAt(arena int, p []byte, off uint64) error {
	s.collectLeaves(arena, p, off)
	for len(p) > 0 {
		w, err := s.windowAt(arena, off)
		if err != nil {
			return err
		}
		n := min(uint64(len(p)), w.off+w.size-off)
		if _, err := w.file.WriteAt(p[:n], int64(off-w.off)); err != nil {
			return fmt.Errorf("stage arena %d at %d: %w", arena, off, err)
		}
		if err := s.wrote(arena, w, n); err != nil {
			return err
		}
		p, off = p[n:], off+n
	}
	return nil
}

// windowAt returns arena's window holding off, creating its memfd if it is
// the window's first byte.
func (s *stagedSink) windowAt(arena int, off uint64) (*stageWindow, error) {
	size := s.pl.Allocations[arena].Bytes
	if off >= size {
		return nil, fmt.Errorf("stage arena %d at %d: past its %d bytes", arena, off, size)
	}
	k := windowKey{arena, int(off / s.window)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.open[k]; w != nil {
		return w, nil
	}
	w := &stageWindow{off: uint64(k.index) * s.window}
	w.size = min(s.window, size-w.off)
	f, err := sdk.NewMemfd(StageMemfdName, w.size)
	if err != nil {
		return nil, fmt.Errorf("stage arena %d: %w", arena, err)
	}
	w.file = f
	s.open[k] = w
	s.staged += w.size
	s.peak = max(s.peak, s.staged)
	return w, nil
}

// wrote counts n bytes written into w; the write that completes it loads
// it and closes its memfd.
func (s *stagedSink) wrote(arena int, w *stageWindow, n uint64) error {
	s.mu.Lock()
	w.written += n
	done := w.written == w.size
	if done {
		delete(s.open, windowKey{arena, int(w.off / s.window)})
	}
	s.mu.Unlock()
	if !done {
		return nil
	}
	err := s.load(arena, w)
	closeErr := w.file.Close()
	s.mu.Lock()
	s.staged -= w.size
	s.mu.Unlock()
	if err == nil && closeErr != nil {
		err = fmt.Errorf("close the staging memfd of arena %d: %w", arena, closeErr)
	}
	return err
}

// load seals w's memfd against writes and has the backend Load it into
// arena at w.off.
func (s *stagedSink) load(arena int, w *stageWindow) error {
	if err := memfdseal.Seal(w.file); err != nil {
		return fmt.Errorf("stage arena %d: %w", arena, err)
	}
	ext := []sdk.Extent{{Path: stagePath(w.file), Length: w.size, DestOffset: w.off}}
	st, err := sdk.LoadWithStats(s.ctx, s.d.Backend(), (*s.job.Allocs)[arena], ext, nil)
	if err != nil {
		return fmt.Errorf("load arena %d [%d, +%d) from its staging memfd: %w", arena, w.off, w.size, err)
	}
	st.Leaves = nil // the staging file's, not a checkpoint file's
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loaded += w.size
	s.windows++
	s.fill.Add(st)
	return nil
}

// stagePath is the path the plugin (the daemon's child, same user) opens
// the daemon's staging memfd f by.
func stagePath(f *os.File) string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd())
}

// collectLeaves writes the bytes p at off of arena into the leaves of
// every file whose extents they cover.
func (s *stagedSink) collectLeaves(arena int, p []byte, off uint64) {
	end := off + uint64(len(p))
	for _, e := range s.pl.Allocations[arena].Extents {
		lo, hi := max(off, e.DestOffset), min(end, e.DestOffset+e.Length)
		if lo >= hi {
			continue
		}
		if a := s.leaves[e.Path]; a != nil {
			a.Write(int64(e.FileOffset+lo-e.DestOffset), p[lo-off:hi-off])
		}
	}
}

// Commit checks that every window was loaded: the arenas hold every byte.
func (s *stagedSink) Commit(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.open) != 0 || s.loaded != s.pl.AllocatedBytes() {
		return fmt.Errorf("staged fill: %d of %d bytes loaded, %d windows still open", s.loaded, s.pl.AllocatedBytes(), len(s.open))
	}
	return nil
}

// Abort closes the open windows' memfds and frees the arenas.
func (s *stagedSink) Abort(cause error) {
	s.log.Debug("cross-node fill aborted: freeing its arenas and staging memory", "error", cause)
	s.close()
	s.job.freeAllocs(s.d)
}

// close closes the memfds of the windows still open (a fetch that failed
// or ended early); the filler calls it whatever the outcome.
func (s *stagedSink) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, w := range s.open {
		_ = w.file.Close()
		s.staged -= w.size
		delete(s.open, k)
	}
}

// received is how proveContent reads what the sink received: every file's
// leaves as collected, and the arenas read back through the backend.
func (s *stagedSink) received(ctx context.Context) receivedBytes {
	r := receivedBytes{leaves: s.leaves, arenas: make([]io.ReaderAt, len(*s.job.Allocs))}
	for i, id := range *s.job.Allocs {
		r.arenas[i] = backendReader{ctx: ctx, b: s.d.Backend(), id: id}
	}
	return r
}

func (s *stagedSink) reservedBytes() uint64 { return s.reserved }

// backendReader reads an allocation through the backend's Read, in pieces
// of at most sdk.MaxReadBytes (the bytes cross the plugin boundary).
type backendReader struct {
	ctx context.Context
	b   sdk.Backend
	id  sdk.AllocationID
}

func (r backendReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("backend read at a negative offset")
	}
	done := 0
	for done < len(p) {
		n := min(uint64(len(p)-done), sdk.MaxReadBytes)
		b, err := r.b.Read(r.ctx, r.id, uint64(off)+uint64(done), n)
		if err != nil {
			return done, fmt.Errorf("read allocation %d at %d: %w", r.id, uint64(off)+uint64(done), err)
		}
		if uint64(len(b)) != n {
			return done, fmt.Errorf("read allocation %d at %d: %d of %d bytes", r.id, uint64(off)+uint64(done), len(b), n)
		}
		done += copy(p[done:], b)
	}
	return done, nil
}

var _ peer.Sink = (*stagedSink)(nil)
