package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/sdk"
)

// PeerFill modes (Options.PeerFill, serve --peer-fill).
const (
	// PeerFillAuto (the default) tries the peer fillers before the files.
	PeerFillAuto = "auto"
	// PeerFillOff reads the files without asking any peer.
	PeerFillOff = "off"
)

// Where a generation's bytes came from (GenerationStatus.filled_from).
const (
	// FilledFromFiles: read from the checkpoint's files.
	FilledFromFiles = "files"
	// filledFromPeerPrefix starts "peer GPU-<uuid>" (a sibling daemon on
	// the node) and "peer HOST:PORT" (another node's daemon).
	filledFromPeerPrefix = "peer "
)

// errNoPeer is what a peerFiller returns (wrapped) when no peer of its kind
// holds the weights: nothing was tried, so it is not a fallback (Status
// fill_fallback stays "" for it).
var errNoPeer = errors.New("no peer holds these weights")

// peerFiller fills a file load's arenas from a peer instead of the files:
// the same-node filler (a sibling daemon's GPU, siblingfill.go) and the
// cross-node one (--peers). Daemon.peerFillers lists them in the order they
// are tried; the first that succeeds fills the generation.
//
// fillFromPeer appends every allocation it makes to job.g.allocs as soon as
// it exists — one per job.pl.Allocations, in order, each holding at least
// the plan's bytes at the plan's places — fills them, checks their bytes
// and returns what the load records. On an error the caller frees
// job.g.allocs (whatever the filler appended), logs the reason at warn,
// records it as the generation's fill_fallback and tries the next filler,
// then the files. An error wrapping errNoPeer means nothing was tried.
type peerFiller interface {
	fillFromPeer(ctx context.Context, job *loadJob) (peerFill, error)
}

// peerFill is what a successful peer fill hands the load.
type peerFill struct {
	// From is GenerationStatus.filled_from: "peer GPU-<uuid>" or
	// "peer HOST:PORT".
	From string
	// Content is the content record of every file of job.ck.Files, and
	// must be TRUE: each carries the local file's Identity because the
	// copy was proven to be that file's bytes — against what the local
	// file is known to hold (the user's digest cache, a trusted hub blob
	// name, or the file hashed alongside the copy: localcontent.go), never
	// the peer's memory or its records alone. A filler that cannot prove
	// a file fails instead. A record's SHA256, when set, is a hub blob
	// name true of that very file (verified by the sibling that loaded it,
	// or the trusted name the copy was proven by): the generation starts
	// with it verified, and its background verifier does not read the
	// file again.
	Content []cacheconfig.FileContent
	// Reserved is what the backend reserved for job.g.allocs, summed.
	Reserved uint64
	// Copy is the time of the copy itself, Verify the time spent checking
	// the bytes before returning.
	Copy, Verify time.Duration
	// Path says how the bytes moved, for the log (sdk.PeerCopyStats.Path:
	// "p2p", "staged", "memcpy"; a transport's name).
	Path string
}

// peerFillers are the fillers a file load tries before the files, in order:
// the same node first, then other nodes. None with PeerFillOff.
func (d *Daemon) peerFillers() []peerFiller {
	if d.opts.PeerFill == PeerFillOff {
		return nil
	}
	// The same node first, then other nodes.
	fs := []peerFiller{&siblingFiller{d: d}}
	if len(d.opts.Peer.Peers) > 0 {
		fs = append(fs, netFiller{d: d})
	}
	return fs
}

// fillFromPeers tries every peer filler for job (allocMu held, job
// admitted). It returns the first fill that succeeded, with job.g.allocs
// holding its arenas, or ok false with job.g.allocs empty and the reasons
// of the fillers that tried and failed, "; "-joined (the generation's
// fill_fallback), for the caller to read the files.
func (d *Daemon) fillFromPeers(ctx context.Context, job *loadJob) (fill peerFill, ok bool, fallback string) {
	var reasons []string
	for _, f := range d.peerFillers() {
		fill, err := f.fillFromPeer(ctx, job)
		if err == nil && len(fill.Content) != len(job.ck.Files) {
			err = fmt.Errorf("peer fill from %s: %d content records for %d files", fill.From, len(fill.Content), len(job.ck.Files))
		}
		if err == nil && d.opts.VerifyLoad {
			// serve --verify: the copy compared with the files, byte
			// range by byte range; a copy that differs is a fallback to
			// the files (which are then verified as any load), not the
			// daemon's end.
			if verr := d.verifyLoad(ctx, job.pl, job.g.allocs, job.ck); verr != nil {
				err = fmt.Errorf("peer fill from %s: verify: %w", fill.From, verr)
			} else {
				d.log.Info("verified the peer fill against the checkpoint", "model", job.g.model, "from", fill.From, "bytes", job.pl.Bytes)
			}
		}
		if err == nil {
			return fill, true, ""
		}
		d.freeGenAllocs(job.g)
		if errors.Is(err, errNoPeer) {
			d.log.Info("peer fill: no peer to fill from", "model", job.g.model, "reason", err.Error())
			continue
		}
		d.log.Warn("peer fill failed: reading the files instead", "model", job.g.model, "error", err)
		reasons = append(reasons, err.Error())
		if ctx.Err() != nil {
			break
		}
	}
	return peerFill{}, false, strings.Join(reasons, "; ")
}

// loadFromPeer is loadGeneration's peer half: job's arenas filled from a
// peer (job.g.allocs) and exported, the load's statistics recorded in
// job.g.load, and the content records returned. filled false (nothing
// held, job.g.load.FillFallback set) when no peer filled them. An export
// error leaves job.g.allocs for the caller to free.
func (d *Daemon) loadFromPeer(ctx context.Context, job *loadJob) (handles []sdk.Handle, content []cacheconfig.FileContent, filled bool, err error) {
	fill, ok, fallback := d.fillFromPeers(ctx, job)
	g, pl := job.g, job.pl
	if !ok {
		g.load.FillFallback = fallback
		return nil, nil, false, nil
	}
	g.load = LoadStats{Bytes: pl.Bytes, AllocatedBytes: fill.Reserved, Allocations: len(pl.Allocations),
		Extents: pl.ExtentCount(), Duration: fill.Copy, Source: SourceFiles, FilledFrom: fill.From,
		FromPeer: pl.Bytes, PeerVerify: fill.Verify}
	d.log.Info("filled from a peer", "model", g.model, "from", fill.From, "bytes", pl.Bytes, "arenas", len(pl.Allocations),
		"path", fill.Path, "copy_s", fill.Copy.Seconds(), "verify_s", fill.Verify.Seconds(), "bytes_per_second", g.load.BytesPerSecond())
	if d.opts.Progress != nil {
		d.opts.Progress(pl.Bytes, pl.Bytes)
	}
	startExport := time.Now()
	if handles, err = d.export(ctx, g.allocs); err != nil {
		return nil, nil, true, err
	}
	g.load.Export = time.Since(startExport)
	return handles, fill.Content, true, nil
}
