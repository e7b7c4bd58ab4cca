package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/daemon/fill"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/sdk"
)

// PeerFill modes (Options.PeerFill, serve --peer-fill).
const (
	// PeerFillAuto (the default) tries the peer fillers before the files.
	PeerFillAuto = "auto"
	// PeerFillOff reads the files without asking any peer.
	PeerFillOff = "off"
)

// Where a generation's bytes came from (GenerationStatus.filled_from):
// FilledFromFiles, read from the checkpoint's files, or a peer's
// (fill.FilledFromPeerPrefix).
const FilledFromFiles = "files"

// PeerOptions configure the cross-node peer fill (fill.PeerOptions).
type PeerOptions = fill.PeerOptions

// ErrPeerOptions: the peer options are incomplete or malformed.
var ErrPeerOptions = fill.ErrPeerOptions

// DefaultStageWindowBytes is a cross-node fill's staging window into
// device arenas (fill.DefaultStageWindowBytes).
const DefaultStageWindowBytes = fill.DefaultStageWindowBytes

// peerFiller fills a file load's arenas from a peer instead of the files:
// the same-node filler (a sibling daemon's GPU, fill.Sibling) and the
// cross-node one (--peers, fill.Net). Daemon.peerFillers lists them in
// the order they are tried; the first that succeeds fills the generation.
//
// FillFromPeer appends every allocation it makes to the job's Allocs (the
// generation's) as soon as it exists — one per plan allocation, in order,
// each holding at least the plan's bytes at the plan's places — fills
// them, checks their bytes and returns what the load records. On an error
// the caller frees the generation's allocations (whatever the filler
// appended), logs the reason at warn, records it as the generation's
// fill_fallback and tries the next filler, then the files. An error
// wrapping fill.ErrNoPeer means nothing was tried.
type peerFiller interface {
	FillFromPeer(ctx context.Context, job *fill.Job) (fill.Result, error)
}

// fillJob is job as a filler sees it: the generation's config, its
// allocation list and arena sizes to fill.
func (job *loadJob) fillJob() *fill.Job {
	return &fill.Job{Config: job.g.Config, Checkpoint: job.ck, Plan: job.pl, Allocs: &job.g.Allocs, ArenaBytes: &job.g.ArenaBytes}
}

// fillEnv is the fillers' view of the daemon, as of now.
func (d *Daemon) fillEnv() fill.Env {
	return fill.Env{Daemon: fillHost{d}, Log: d.log, GPU: d.opts.GPU, DeviceUUID: d.info.DeviceUUID, Layout: d.opts.Layout,
		DigestCache: d.opts.DigestCache, Peer: d.opts.Peer, Progress: d.opts.Progress}
}

// fillHost is the daemon as fill.Daemon: its current backend and its
// allocation steps.
type fillHost struct{ d *Daemon }

func (h fillHost) Backend() sdk.Backend { return h.d.backend }

func (h fillHost) Allocate(ctx context.Context, pl *plan.Plan, ids *[]sdk.AllocationID) (uint64, error) {
	return h.d.allocate(ctx, pl, ids)
}

func (h fillHost) Export(ctx context.Context, ids []sdk.AllocationID) ([]sdk.Handle, error) {
	return h.d.export(ctx, ids)
}

func (h fillHost) FreeAllocs(ids []sdk.AllocationID) { h.d.freeAllocs(ids) }

// recordLoadedDigests stores the content digests of a load from the files
// in the user's digest cache (fill.Env.RecordLoadedDigests).
func (d *Daemon) recordLoadedDigests(content []cacheconfig.FileContent) {
	d.fillEnv().RecordLoadedDigests(content)
}

// peerFillers are the fillers a file load tries before the files, in order:
// the same node first, then other nodes. None with PeerFillOff.
func (d *Daemon) peerFillers() []peerFiller {
	if d.opts.PeerFill == PeerFillOff {
		return nil
	}
	// The same node first, then other nodes.
	env := d.fillEnv()
	fs := []peerFiller{&fill.Sibling{Env: env}}
	if len(d.opts.Peer.Peers) > 0 {
		fs = append(fs, fill.Net{Env: env})
	}
	return fs
}

// fillFromPeers tries every peer filler for job (allocMu held, job
// admitted). It returns the first fill that succeeded, with job.g.Allocs
// holding its arenas, or ok false with job.g.Allocs empty and the reasons
// of the fillers that tried and failed, "; "-joined (the generation's
// fill_fallback), for the caller to read the files.
func (d *Daemon) fillFromPeers(ctx context.Context, job *loadJob) (_ fill.Result, ok bool, fallback string) {
	var reasons []string
	for _, f := range d.peerFillers() {
		res, err := f.FillFromPeer(ctx, job.fillJob())
		if err == nil && len(res.Content) != len(job.ck.Files) {
			err = fmt.Errorf("peer fill from %s: %d content records for %d files", res.From, len(res.Content), len(job.ck.Files))
		}
		if err == nil && d.opts.VerifyLoad {
			// serve --verify: the copy compared with the files, byte
			// range by byte range; a copy that differs is a fallback to
			// the files (which are then verified as any load), not the
			// daemon's end.
			if verr := d.verifyLoad(ctx, job.pl, job.g.Allocs, job.ck); verr != nil {
				err = fmt.Errorf("peer fill from %s: verify: %w", res.From, verr)
			} else {
				d.log.Info("verified the peer fill against the checkpoint", "model", job.g.Model, "from", res.From, "bytes", job.pl.Bytes)
			}
		}
		if err == nil {
			return res, true, ""
		}
		d.freeGenAllocs(job.g)
		if errors.Is(err, fill.ErrNoPeer) {
			d.log.Info("peer fill: no peer to fill from", "model", job.g.Model, "reason", err.Error())
			continue
		}
		d.log.Warn("peer fill failed: reading the files instead", "model", job.g.Model, "error", err)
		reasons = append(reasons, err.Error())
		if ctx.Err() != nil {
			break
		}
	}
	return fill.Result{}, false, strings.Join(reasons, "; ")
}

// loadFromPeer is loadGeneration's peer half: job's arenas filled from a
// peer (job.g.Allocs) and exported, the load's statistics recorded in
// job.g.Load, and the content records returned. filled false (nothing
// held, job.g.Load.FillFallback set) when no peer filled them. An export
// error leaves job.g.Allocs for the caller to free.
func (d *Daemon) loadFromPeer(ctx context.Context, job *loadJob) (handles []sdk.Handle, content []cacheconfig.FileContent, filled bool, err error) {
	res, ok, fallback := d.fillFromPeers(ctx, job)
	g, pl := job.g, job.pl
	if !ok {
		g.Load.FillFallback = fallback
		return nil, nil, false, nil
	}
	g.Load = LoadStats{Bytes: pl.Bytes, AllocatedBytes: res.Reserved, Allocations: len(pl.Allocations),
		Extents: pl.ExtentCount(), Duration: res.Copy, Source: SourceFiles, FilledFrom: res.From,
		FromPeer: pl.Bytes, PeerVerify: res.Verify}
	d.log.Info("filled from a peer", "model", g.Model, "from", res.From, "bytes", pl.Bytes, "arenas", len(pl.Allocations),
		"path", res.Path, "copy_s", res.Copy.Seconds(), "verify_s", res.Verify.Seconds(), "bytes_per_second", g.Load.BytesPerSecond())
	if d.opts.Progress != nil {
		d.opts.Progress(pl.Bytes, pl.Bytes)
	}
	startExport := time.Now()
	if handles, err = d.export(ctx, g.Allocs); err != nil {
		return nil, nil, true, err
	}
	g.Load.Export = time.Since(startExport)
	return handles, res.Content, true, nil
}
