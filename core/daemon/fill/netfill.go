package fill

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/internal/defaults"
	"github.com/wcache/wcache/internal/parallel"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
	"github.com/wcache/wcache/sdk/names"
)

// This file is the cross-node filler (Net): a file load asks
// Options.Peer.Peers for its weights identity and streams the offer's
// arenas into freshly allocated ones (peer.Fetch: parallel sessions, every
// 1 MiB leaf hashed as it arrives, every arena's content digest checked
// against the offer before Commit), then computes the files' content
// digests from the received bytes (proveContent). Memfd arenas (the mock)
// are written through their descriptors (arenaSink); device arenas are
// loaded by the plugin from staging memfds, window by window (stagedSink,
// netstage.go). Any failure leaves the allocations to the caller to free,
// and the load reads the files.

// Net fills from other nodes' daemons (Env.Peer.Peers).
type Net struct{ Env }

// FillFromPeer fills job's arenas from the first peer offering its weights
// identity. A backend exporting memfd arenas is written through their
// descriptors (arenaSink); any other (a GPU's device memory, which the
// backend contract cannot write from the host) Loads the received bytes
// from staging memfds (stagedSink). No peer holding the identity (every
// one answered "not held") wraps ErrNoPeer.
func (f Net) FillFromPeer(ctx context.Context, job *Job) (Result, error) {
	po := f.Peer
	info, err := f.Daemon.Backend().Info(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("cross-node fill: backend info: %w", err)
	}
	identity, err := cacheconfig.WeightsIdentity(job.Config, cacheconfig.WeightsFromFiles)
	if err != nil {
		return Result{}, fmt.Errorf("cross-node fill: %w", err)
	}
	transport := po.Transport
	if transport == nil {
		transport = &peer.TCPTransport{Creds: po.Creds}
	}
	var self []string
	if po.Listen != "" {
		self = append(self, po.Listen)
	}
	var sink receivingSink
	if slices.Contains(info.HandleKinds, names.KindMemfd) {
		sink = &arenaSink{d: f.Daemon, log: f.Log, pl: job.Plan, job: job}
	} else {
		window := po.StageWindowBytes
		defaults.Zero(&window, DefaultStageWindowBytes)
		sink = &stagedSink{d: f.Daemon, log: f.Log, ck: job.Checkpoint, pl: job.Plan, job: job, window: window}
	}
	defer sink.close()
	// What the local files hold, known or hashed while the bytes arrive
	// (from the offer on: hashOnPrepare): the fill is proven against it,
	// never against the peer's word alone.
	lc := f.startLocalContent(ctx, job.Checkpoint)
	defer lc.stop()
	res, err := peer.Fetch(ctx, identity, hashOnPrepare{sink, lc}, peer.FetchOptions{Transport: transport, Peers: po.Peers, Self: self,
		Streams: po.Streams, MaxBytes: job.Plan.AllocatedBytes(), Logger: f.Log.Named("peer"),
		Deadline: po.FillTimeout, MinRate: po.FillMinRate, RateWindow: po.FillRateWindow})
	if err != nil {
		if onlyNotHeld(err) {
			return Result{}, fmt.Errorf("%w: %w", ErrNoPeer, err)
		}
		return Result{}, fmt.Errorf("cross-node fill: %w", err)
	}
	startVerify := time.Now()
	content, err := f.proveContent(ctx, job.Checkpoint, job.Plan, sink.received(ctx), lc)
	if err != nil {
		return Result{}, fmt.Errorf("cross-node fill from %s: %w", res.Peer, err)
	}
	*job.ArenaBytes = job.Plan.ArenaBytes()
	if s, ok := sink.(*stagedSink); ok {
		f.Log.Info("cross-node fill: loaded through staging memfds", "windows", s.windows, "window_bytes", s.window,
			"peak_staged_bytes", s.peak, "backend", info.Name, "load_wall_s", s.fill.Wall.Seconds(), "load_read_s", s.fill.Read.Seconds())
	}
	return Result{From: FilledFromPeerPrefix + res.Peer, Content: content, Reserved: sink.reservedBytes(),
		Copy: res.Wall, Verify: time.Since(startVerify)}, nil
}

// receivingSink is what the cross-node filler fetches into: a peer.Sink
// that tells what it reserved, how proveContent reads what it received,
// and frees its own resources (not the arenas) on close.
type receivingSink interface {
	peer.Sink
	reservedBytes() uint64
	received(ctx context.Context) receivedBytes
	close()
}

// receivedBytes is how proveContent reads the bytes a fill received.
type receivedBytes struct {
	// arenas read each arena's bytes.
	arenas []io.ReaderAt
	// leaves, when not nil, hold each file's content-digest leaves (by
	// path, its header's included) collected as the bytes arrived; files
	// without are digested from arenas.
	leaves map[string]*filedigest.Assembler
}

// hashOnPrepare starts hashing the local files a fill must prove
// (localContent.begin) when a peer's offer is prepared, so that a fetch
// no peer answers reads no file.
type hashOnPrepare struct {
	receivingSink
	lc *localContent
}

func (s hashOnPrepare) Prepare(ctx context.Context, offer peer.Offer) error {
	s.lc.begin()
	return s.receivingSink.Prepare(ctx, offer)
}

// checkOfferLayout refuses an offer whose arenas are not pl's (count and
// sizes: the same files planned with other options, or other files).
func checkOfferLayout(pl *plan.Plan, offer peer.Offer) error {
	if len(offer.Arenas) != len(pl.Allocations) {
		return fmt.Errorf("the offer has %d arenas, this daemon's plan %d: not the same layout", len(offer.Arenas), len(pl.Allocations))
	}
	for i, a := range offer.Arenas {
		if a.Size != pl.Allocations[i].Bytes {
			return fmt.Errorf("the offer's arena %d has %d bytes, this daemon's plan %d: not the same layout", i, a.Size, pl.Allocations[i].Bytes)
		}
	}
	return nil
}

// headerLeaves returns an Assembler of alg's leaves of file f holding its
// header (the length prefix and the header as the plan read it).
func headerLeaves(alg filedigest.Algorithm, f *safetensors.File) *filedigest.Assembler {
	asm := alg.NewAssembler(f.Stamp.Size)
	head := make([]byte, 8, 8+len(f.RawHeader))
	binary.LittleEndian.PutUint64(head, uint64(len(f.RawHeader)))
	asm.Write(0, append(head, f.RawHeader...))
	return asm
}

// onlyNotHeld reports whether a Fetch error says only that no peer holds
// the identity (every peer reached answered peer.ErrNotHeld): nothing was
// tried. A peer refused in the handshake, unreachable, busy, or any other
// error is a fallback worth reporting.
func onlyNotHeld(err error) bool {
	if errors.Is(err, peer.ErrNotHeld) && !errors.Is(err, peer.ErrNoPeer) {
		return true
	}
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		for _, c := range e.Unwrap() {
			if c != peer.ErrNoPeer && !onlyNotHeld(c) {
				return false
			}
		}
		return true
	case interface{ Unwrap() error }:
		return onlyNotHeld(e.Unwrap())
	}
	return false
}

// arenaSink is a peer.Sink writing the offer into the plan's arenas
// through their memfd descriptors.
type arenaSink struct {
	d   Daemon
	log hclog.Logger
	pl  *plan.Plan
	job *Job

	handles   []sdk.Handle
	reserved  uint64
	allocated time.Duration
	closeOnce sync.Once
}

// Prepare refuses an offer whose arenas are not the plan's (count and
// sizes: the same files planned with other options, or other files), then
// allocates and exports every arena.
func (s *arenaSink) Prepare(ctx context.Context, offer peer.Offer) error {
	if err := checkOfferLayout(s.pl, offer); err != nil {
		return err
	}
	start := time.Now()
	*s.job.ArenaBytes = s.pl.ArenaBytes()
	reserved, err := s.d.Allocate(ctx, s.pl, s.job.Allocs)
	s.reserved = reserved
	if err == nil {
		s.handles, err = s.d.Export(ctx, *s.job.Allocs)
	}
	if err == nil {
		for i, h := range s.handles {
			if h.File == nil || h.Kind != names.KindMemfd {
				err = fmt.Errorf("arena %d exported as %q: cross-node fill writes memfd arenas only: %w", i, h.Kind, sdk.ErrUnsupported)
				break
			}
		}
	}
	s.allocated = time.Since(start)
	return err
}

// WriteAt writes p into arena's memfd at off.
func (s *arenaSink) WriteAt(arena int, p []byte, off uint64) error {
	_, err := s.handles[arena].File.WriteAt(p, int64(off))
	return err
}

// Commit keeps the arenas: the filler proves the content, the load exports
// and serves them.
func (s *arenaSink) Commit(context.Context) error { return nil }

// Abort frees the arenas at once (the load then frees nothing more).
func (s *arenaSink) Abort(cause error) {
	s.log.Debug("cross-node fill aborted: freeing its arenas", "error", cause)
	s.close()
	s.job.freeAllocs(s.d)
}

// close closes the descriptors the sink exported to write through (the
// load exports the arenas again to serve them).
func (s *arenaSink) close() {
	s.closeOnce.Do(func() { closeHandleFiles(s.handles) })
}

func (s *arenaSink) reservedBytes() uint64 { return s.reserved }

// received reads the arenas through their descriptors.
func (s *arenaSink) received(context.Context) receivedBytes {
	r := receivedBytes{arenas: make([]io.ReaderAt, len(s.handles))}
	for i, h := range s.handles {
		r.arenas[i] = h.File
	}
	return r
}

// proveContent returns the content record of every checkpoint file from
// the received bytes: each file's digest assembled from its header (as the
// plan read it) and the arenas' bytes at its extents, proven against what
// the local file is known to hold (proveCopy, lc: the digest cache entry
// of its identity, its hub blob name, or the file hashed while the bytes
// arrived). A file the received bytes do not make fails the fill
// (peer.ErrDigestMismatch: a peer of the same weights identity with other
// tensor values — a fine-tune of the same shapes, memory written since it
// was loaded); the files are read instead. Every record carries the local
// file's identity: the bytes served are proven to be that file's.
func (e Env) proveContent(ctx context.Context, ck *safetensors.Checkpoint, pl *plan.Plan, rx receivedBytes, lc *localContent) ([]cacheconfig.FileContent, error) {
	out := make([]cacheconfig.FileContent, 0, len(ck.Files))
	for _, f := range ck.Files {
		digest := func(alg filedigest.Algorithm) (string, error) {
			got, err := digestFromArenas(ctx, alg, f, pl, rx)
			if err != nil {
				return "", fmt.Errorf("content of %s: %w", f.Path, err)
			}
			return got, nil
		}
		rec, err := e.proveCopy(ctx, lc, f, digest, func() (string, error) { return sha256FromArenas(ctx, f, pl, rx.arenas) })
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b cacheconfig.FileContent) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// sha256FromArenas is the plain SHA-256 file f would have with the arenas'
// bytes at its extents: its header, then its data in file order (gaps
// between extents read from the file), read in pieces of sdk.MaxReadBytes
// (one backend Read each, for arenas read through the backend).
func sha256FromArenas(ctx context.Context, f *safetensors.File, pl *plan.Plan, arenas []io.ReaderAt) (string, error) {
	type piece struct {
		arena int
		e     sdk.Extent
	}
	var pieces []piece
	for ai, a := range pl.Allocations {
		for _, e := range a.Extents {
			if e.Path == f.Path {
				pieces = append(pieces, piece{ai, e})
			}
		}
	}
	slices.SortFunc(pieces, func(a, b piece) int { return cmp.Compare(a.e.FileOffset, b.e.FileOffset) })
	file, err := os.Open(f.Path)
	if err != nil {
		return "", err
	}
	defer file.Close()
	h := sha256.New()
	var head [8]byte
	binary.LittleEndian.PutUint64(head[:], uint64(len(f.RawHeader)))
	h.Write(head[:])
	h.Write(f.RawHeader)
	pos := uint64(8 + len(f.RawHeader))
	buf := make([]byte, sdk.MaxReadBytes)
	copyFrom := func(r io.ReaderAt, off, n uint64) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err := io.CopyBuffer(h, io.NewSectionReader(r, int64(off), int64(n)), buf)
		return err
	}
	for _, p := range append(pieces, piece{e: sdk.Extent{FileOffset: uint64(f.Stamp.Size)}}) {
		if p.e.FileOffset < pos {
			return "", fmt.Errorf("extent at %d of %s overlaps the bytes before %d", p.e.FileOffset, f.Path, pos)
		}
		if err := copyFrom(file, pos, p.e.FileOffset-pos); err != nil {
			return "", err
		}
		if p.e.Length > 0 {
			if err := copyFrom(arenas[p.arena], p.e.DestOffset, p.e.Length); err != nil {
				return "", err
			}
		}
		pos = p.e.FileOffset + p.e.Length
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// digestFromArenas is the content digest in alg file f would have with the
// arenas' bytes at its extents: from the leaves rx collected as the bytes
// arrived (when of alg), else read from rx's arenas (leaves neither covers
// read from the file).
func digestFromArenas(ctx context.Context, alg filedigest.Algorithm, f *safetensors.File, pl *plan.Plan, rx receivedBytes) (string, error) {
	opts := filedigest.Options{Algorithm: alg}
	if asm := rx.leaves[f.Path]; asm != nil && asm.Algorithm() == alg {
		return filedigest.Complete(ctx, f.Path, f.Stamp.Size, asm.Leaves(), opts)
	}
	asm := headerLeaves(alg, f)
	var pieces []arenaPiece
	for ai, a := range pl.Allocations {
		for _, e := range a.Extents {
			if e.Path == f.Path {
				pieces = appendPieces(pieces, ai, e)
			}
		}
	}
	if err := hashPieces(ctx, asm, rx.arenas, pieces); err != nil {
		return "", err
	}
	return filedigest.Complete(ctx, f.Path, f.Stamp.Size, asm.Leaves(), opts)
}

// arenaPiece is a run of a file's bytes in an arena: [fileOff, fileOff+n)
// of the file at destOff of arena ai, within one leaf.
type arenaPiece struct {
	ai               int
	destOff, fileOff uint64
	n                uint64
}

// appendPieces appends extent e of arena ai cut at the file's leaf
// boundaries, so that each piece is a whole leaf but at the extent's ends.
func appendPieces(pieces []arenaPiece, ai int, e sdk.Extent) []arenaPiece {
	for done := uint64(0); done < e.Length; {
		fo := e.FileOffset + done
		n := min(e.Length-done, filedigest.LeafBytes-fo%filedigest.LeafBytes)
		pieces = append(pieces, arenaPiece{ai: ai, destOff: e.DestOffset + done, fileOff: fo, n: n})
		done += n
	}
	return pieces
}

// hashPieces writes every piece's bytes into asm, on up to GOMAXPROCS
// goroutines (hashing leaves is what a fill's check waits for). An arena
// mapped here (mappedArena) is hashed in place; others are read through
// ReadAt into a leaf-sized buffer per goroutine. The first error ends it.
func hashPieces(ctx context.Context, asm *filedigest.Assembler, arenas []io.ReaderAt, pieces []arenaPiece) error {
	workers := runtime.GOMAXPROCS(0)
	bufs := make([][]byte, workers)
	return parallel.For(ctx, len(pieces), workers, func(w, i int) error {
		pc := pieces[i]
		var p []byte
		if m, ok := arenas[pc.ai].(mappedArena); ok && pc.destOff+pc.n <= uint64(len(m)) {
			p = m[pc.destOff : pc.destOff+pc.n]
		} else {
			if bufs[w] == nil {
				bufs[w] = make([]byte, filedigest.LeafBytes)
			}
			p = bufs[w][:pc.n]
			if _, err := arenas[pc.ai].ReadAt(p, int64(pc.destOff)); err != nil {
				return fmt.Errorf("arena %d at %d: %w", pc.ai, pc.destOff, err)
			}
		}
		asm.Write(int64(pc.fileOff), p)
		return nil
	})
}

// mappedArena is an arena's bytes mapped into this process (a memfd or
// posix-shm export, exportedReaders): hashPieces hashes them in place.
type mappedArena []byte

// ReadAt copies from the mapping.
func (m mappedArena) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(m)) {
		return 0, fmt.Errorf("read at %d of a %d-byte mapping: %w", off, len(m), io.EOF)
	}
	n := copy(p, m[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

var (
	_ receivingSink = (*arenaSink)(nil)
	_ receivingSink = (*stagedSink)(nil)
)
