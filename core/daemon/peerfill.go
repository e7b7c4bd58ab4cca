package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
)

// This file is the fetch side of cross-node peer fill: a file load asks
// Options.Peer.Peers for its weights identity and streams the offer's
// arenas into freshly allocated ones (peer.Fetch: parallel sessions, every
// 1 MiB leaf hashed as it arrives, every arena's content digest checked
// before Commit). Any failure frees what was allocated and the load reads
// the files.

// SourcePeer is LoadStats.Source of a generation filled from another
// node's daemon.
const SourcePeer = "peer"

// peerFill is the outcome of a committed cross-node fill.
type peerFill struct {
	// from is "peer HOST:PORT".
	from    string
	handles []sdk.Handle
	// content is the files' content, proven from the received bytes
	// against the digests the daemon knew (Options.Peer.Digests); nil
	// when it knew none (see proveContent).
	content []cacheconfig.FileContent
}

// fillFromPeers fills job's generation from the first peer offering its
// weights identity: g.allocs and g.load are set and the arenas exported.
// On an error nothing is left allocated (g.allocs empty); the error says
// why, for the log and the Status of the files' load. It needs memfd
// arenas (the daemon writes the received bytes through the descriptor):
// a backend without them (a GPU's device memory, which the backend
// contract cannot write from the host) is refused before a peer is asked.
func (d *Daemon) fillFromPeers(ctx context.Context, job *loadJob) (*peerFill, error) {
	po := d.opts.Peer
	if len(po.Peers) == 0 {
		return nil, errors.New("no peers configured")
	}
	info, err := d.backend.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("backend info: %w", err)
	}
	if !slices.Contains(info.HandleKinds, sdk.HandleMemfd) {
		return nil, fmt.Errorf("backend %s exports %v: cross-node fill writes memfd arenas only (device memory has no host write in the backend contract yet): %w",
			info.Name, info.HandleKinds, sdk.ErrUnsupported)
	}
	identity, err := cacheconfig.WeightsIdentity(job.g.config, cacheconfig.WeightsFromFiles)
	if err != nil {
		return nil, err
	}
	transport := po.Transport
	if transport == nil {
		transport = &peer.TCPTransport{Creds: po.Creds}
	}
	var self []string
	if d.peer.addr != "" {
		self = append(self, d.peer.addr)
	}
	sink := &arenaSink{d: d, pl: job.pl, g: job.g}
	start := time.Now()
	res, err := peer.Fetch(ctx, identity, sink, peer.FetchOptions{Transport: transport, Peers: po.Peers, Self: self,
		Streams: po.Streams, MaxBytes: job.pl.AllocatedBytes(), Logger: d.log.Named("peer")})
	if err != nil {
		return nil, err
	}
	g := job.g
	content, err := d.proveContent(ctx, job.ck, job.pl, sink.handles)
	if err != nil {
		sink.free()
		return nil, fmt.Errorf("peer %s: %w", res.Peer, err)
	}
	g.load = LoadStats{Bytes: job.pl.Bytes, AllocatedBytes: sink.reserved, Allocations: len(job.pl.Allocations),
		Extents: job.pl.ExtentCount(), Duration: time.Since(start), Allocate: sink.allocated, Source: SourcePeer}
	d.log.Info("filled from peer", "model", g.model, "peer", res.Peer, "bytes", res.Bytes, "arenas", len(res.Offer.Arenas),
		"seconds", g.load.Duration.Seconds(), "bytes_per_second", g.load.BytesPerSecond(), "content_proven", content != nil)
	if d.opts.Progress != nil {
		d.opts.Progress(job.pl.Bytes, job.pl.Bytes)
	}
	return &peerFill{from: "peer " + res.Peer, handles: sink.handles, content: content}, nil
}

// arenaSink is a peer.Sink writing the offer into the plan's arenas
// through their memfd descriptors.
type arenaSink struct {
	d  *Daemon
	pl *plan.Plan
	g  *generation

	handles   []sdk.Handle
	reserved  uint64
	allocated time.Duration
	freeOnce  sync.Once
}

// Prepare refuses an offer whose arenas are not the plan's (count and
// sizes: the same files planned with other options, or other files), then
// allocates and exports every arena.
func (s *arenaSink) Prepare(ctx context.Context, offer peer.Offer) error {
	if len(offer.Arenas) != len(s.pl.Allocations) {
		return fmt.Errorf("the offer has %d arenas, this daemon's plan %d: not the same layout", len(offer.Arenas), len(s.pl.Allocations))
	}
	for i, a := range offer.Arenas {
		if a.Size != s.pl.Allocations[i].Bytes {
			return fmt.Errorf("the offer's arena %d has %d bytes, this daemon's plan %d: not the same layout", i, a.Size, s.pl.Allocations[i].Bytes)
		}
	}
	start := time.Now()
	s.g.arenaBytes = arenaBytesOf(s.pl)
	reserved, err := s.d.allocate(ctx, s.pl, &s.g.allocs)
	s.reserved = reserved
	if err == nil {
		s.handles, err = s.d.export(ctx, s.g.allocs)
	}
	if err == nil {
		for i, h := range s.handles {
			if h.File == nil || h.Kind != sdk.HandleMemfd {
				err = fmt.Errorf("arena %d exported as %q: cross-node fill writes memfd arenas only: %w", i, h.Kind, sdk.ErrUnsupported)
				break
			}
		}
	}
	s.allocated = time.Since(start)
	if err != nil {
		s.free()
	}
	return err
}

// WriteAt writes p into arena's memfd at off.
func (s *arenaSink) WriteAt(arena int, p []byte, off uint64) error {
	_, err := s.handles[arena].File.WriteAt(p, int64(off))
	return err
}

// Commit keeps the arenas: the caller proves the content and serves them.
func (s *arenaSink) Commit(context.Context) error { return nil }

// Abort frees the arenas.
func (s *arenaSink) Abort(cause error) {
	s.d.log.Debug("peer fill aborted: freeing its arenas", "error", cause)
	s.free()
}

// free closes the exported descriptors and frees the allocations.
func (s *arenaSink) free() {
	s.freeOnce.Do(func() {
		closeHandleFiles(s.handles)
		s.handles = nil
		s.d.freeAllocs(s.g.allocs)
		s.g.allocs = nil
	})
}

// proveContent compares the files' content the received bytes make with
// the digests the daemon knows for its own files (Options.Peer.Digests,
// by file identity). A file whose known digest differs refuses the fill
// (a peer of the same weights identity with other tensor values: a
// fine-tune of the same shapes). When every file is known and matches, it
// returns their content records; when any file is unknown it returns nil:
// the peer's bytes were checked against the digests the peer announced,
// which prove nothing about the local files, so no digest is claimed for
// them. A file's digest is assembled from its header (as read by the
// plan) and the arenas' bytes at its extents; leaves neither covers (gaps
// between tensors) are read from the file.
func (d *Daemon) proveContent(ctx context.Context, ck *safetensors.Checkpoint, pl *plan.Plan, handles []sdk.Handle) ([]cacheconfig.FileContent, error) {
	cache := d.opts.Peer.Digests
	if cache == nil {
		d.log.Warn("peer fill: no digest cache: the files' content is not proven, the generation records none")
		return nil, nil
	}
	known := map[string]string{}
	for _, f := range ck.Files {
		if dg, ok := cache.Lookup(f.Stamp); ok {
			known[f.Path] = dg
		}
	}
	if len(known) == 0 {
		d.log.Warn("peer fill: no file's content digest is known: the files' content is not proven, the generation records none",
			"files", len(ck.Files))
		return nil, nil
	}
	var out []cacheconfig.FileContent
	for _, f := range ck.Files {
		want, ok := known[f.Path]
		if !ok {
			continue
		}
		got, err := digestFromArenas(ctx, f, pl, handles)
		if err != nil {
			return nil, fmt.Errorf("content of %s: %w", f.Path, err)
		}
		if got != want {
			return nil, fmt.Errorf("%w: %s would have content %s, its digest is %s (the peer holds other tensor values under the same weights identity)",
				peer.ErrDigestMismatch, f.Path, got, want)
		}
		out = append(out, cacheconfig.FileContent{Name: filepath.Base(f.Path), Path: f.Path, Digest: got, Identity: f.Stamp})
	}
	if len(out) != len(ck.Files) {
		d.log.Warn("peer fill: some files' content digests are unknown: the generation records none", "known", len(out), "files", len(ck.Files))
		return nil, nil
	}
	slices.SortFunc(out, func(a, b cacheconfig.FileContent) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// digestFromArenas is the content digest file f would have with the
// arenas' bytes at its extents.
func digestFromArenas(ctx context.Context, f *safetensors.File, pl *plan.Plan, handles []sdk.Handle) (string, error) {
	asm := filedigest.NewAssembler(f.Stamp.Size)
	head := make([]byte, 8, 8+len(f.RawHeader))
	binary.LittleEndian.PutUint64(head, uint64(len(f.RawHeader)))
	asm.Write(0, append(head, f.RawHeader...))
	buf := make([]byte, 16<<20)
	for ai, a := range pl.Allocations {
		for _, e := range a.Extents {
			if e.Path != f.Path {
				continue
			}
			for done := uint64(0); done < e.Length; {
				if err := ctx.Err(); err != nil {
					return "", err
				}
				p := buf[:min(uint64(len(buf)), e.Length-done)]
				if _, err := handles[ai].File.ReadAt(p, int64(e.DestOffset+done)); err != nil {
					return "", fmt.Errorf("arena %d at %d: %w", ai, e.DestOffset+done, err)
				}
				asm.Write(int64(e.FileOffset+done), p)
				done += uint64(len(p))
			}
		}
	}
	return filedigest.Complete(ctx, f.Path, f.Stamp.Size, asm.Leaves(), filedigest.Options{})
}

var _ peer.Sink = (*arenaSink)(nil)
