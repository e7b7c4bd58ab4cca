package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon/fill"
	"github.com/wcache/wcache/core/daemon/registry"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk"
)

// fillForAttach is the publish half of the same-node peer fill: an attach
// with cfg that no generation answers (the daemon is empty, or holds other
// configs) fills a generation for cfg from a sibling daemon of this node
// that serves a published generation with cfg's weights identity
// (cacheconfig.WeightsPublished: data-parallel replicas of an engine), so
// that the engine attaches instead of loading from disk and publishing.
// It reports whether such a generation may now serve: the caller matches
// the attach again. false leaves everything as it was (the attach answers
// as without it); a fill that was tried and failed is logged at warn and
// becomes the daemon's fill_fallback (Status, and the generation the
// engine then publishes).
//
// Nothing is tried with PeerFillOff, for a peer that may not publish
// (mayChangeWeights: the fill changes what the daemon holds as a publish
// would), for a config a publish would refuse (publishConfig,
// checkLayout), or when no sibling serves the identity. The fill is a
// publish of the daemon itself (registry.beginPeerFill): a publish of
// cfg in progress, weights held for it, or a busy daemon win and nothing
// is tried; a publish of cfg that begins during the fill is refused as
// ConflictInProgress; a second attach of cfg during the fill waits for
// its end and matches again. An attach waits at most attachFillWait (then
// it is answered "publishing"; the fill goes on). The copy is admitted by
// the memory plan before anything is allocated, and ends with the daemon
// (Stop) or after PublishTimeout, not with the attach.
func (d *Daemon) fillForAttach(ctx context.Context, req cacheconfig.Config, p PeerInfo) bool {
	if d.opts.PeerFill == PeerFillOff || d.mayChangeWeights(p) != nil {
		return false
	}
	cfg, err := d.publishConfig(ctx, req)
	if err != nil || d.checkLayout(cfg) != nil {
		return false
	}
	identity, err := cacheconfig.WeightsIdentity(cfg, cacheconfig.WeightsPublished)
	if err != nil {
		return false
	}
	s := &fill.Sibling{Env: d.fillEnv()}
	cands, err := s.Candidates(ctx, identity, cacheconfig.WeightsPublished)
	if err != nil || len(cands) == 0 {
		d.log.Debug("peer fill of an attach: no sibling serves these weights", "identity", identity, "error", err)
		return false
	}
	self := registry.Peer{PID: int32(os.Getpid()), UID: uint32(os.Geteuid())}
	pub, g, wait, err := d.reg.BeginPeerFill(self, "wcache serve peer fill", cfg,
		registry.CompareFor(true, len(cands[0].Gen.Files), cfg.EngineName), time.Now())
	if err != nil {
		// Weights for cfg were installed since the attach matched (a
		// concurrent fill or publish): match again. Otherwise (a publish
		// in progress, a busy daemon) answer as without a fill.
		var ce *PublishConflictError
		held := errors.As(err, &ce) && ce.Reason == ConflictHoldsWeights
		d.log.Debug("peer fill of an attach: not tried", "reason", err, "held", held)
		return held
	}
	if wait == nil {
		go d.runAttachFill(pub, g, s, cands)
		wait = pub.Filled
	}
	// Bounded, so that a client's manifest deadline does not fail its
	// attach: past attachFillWait it is answered "publishing" (the daemon's
	// own pid) and the fill goes on for the next attach; an engine then
	// loads, and its publish finds the fill in progress or its weights held.
	timer := time.NewTimer(attachFillWait)
	defer timer.Stop()
	select {
	case <-wait:
		return true
	case <-timer.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// attachFillWait bounds how long an attach waits for a peer fill of its
// config (below the clients' default manifest timeouts: 30 s in Python).
const attachFillWait = 20 * time.Second

// runAttachFill fills g, begun by BeginPeerFill for pub, from the first
// candidate that works, and closes pub.Filled when done. It does not end
// with the attach that began it (the fill serves whoever attaches next),
// but with the daemon (pub.Ended) or after PublishTimeout. When no
// candidate works, g is forgotten and the reasons are logged and recorded
// (RecordAttachFallback).
func (d *Daemon) runAttachFill(pub *publisher, g *generation, s *fill.Sibling, cands []fill.Candidate) {
	defer close(pub.Filled)
	ctx, cancel := context.WithTimeout(context.Background(), d.opts.PublishTimeout)
	defer cancel()
	go func() {
		select {
		case <-pub.Ended:
			cancel()
		case <-ctx.Done():
		}
	}()
	d.log.Info("peer fill of an attach begins", "generation", g.ID, "config_digest", g.Digest, "candidates", len(cands))
	var reasons []string
	for _, c := range cands {
		err := d.fillPublishedFrom(ctx, s, pub, g, c, strings.Join(reasons, "; "))
		if err == nil {
			return
		}
		reasons = append(reasons, fmt.Sprintf("peer %s (pid %d, generation %d): %v", c.UUID, c.PID, c.Gen.Generation, err))
		if ctx.Err() != nil {
			break
		}
	}
	reason := strings.Join(reasons, "; ")
	d.reg.AbortPublish(pub)
	d.reg.RecordAttachFallback(g.Digest, reason)
	d.reportHeld()
	d.log.Warn("peer fill of an attach failed: the attach is answered without it (an engine loads and publishes)",
		"config_digest", g.Digest, "reason", reason)
}

// fillPublishedFrom fills g (begun by beginPeerFill) from candidate c:
// lease, the plan of c's tensor table (plan.BuildTable, this daemon's plan
// options) that must place every tensor as c does (fill.SameLayout, views
// allowed), admission, sdk.PeerCopy of every arena, the arena digests
// checked against the source's, then g installed as a serving published
// generation with c's manifest (tensors and views, metadata, content
// records: carriedContent) under g's config. fallback is the reasons of
// the candidates tried before. On an error everything allocated is freed
// and g is left publishing for the next candidate.
func (d *Daemon) fillPublishedFrom(ctx context.Context, s *fill.Sibling, pub *publisher, g *generation, c fill.Candidate, fallback string) (err error) {
	att, release, err := s.Lease(ctx, c)
	if err != nil {
		return err
	}
	defer release()
	m := att.Manifest
	pl, err := d.planAs(m)
	if err != nil {
		return err
	}
	var ids []sdk.AllocationID
	var nm *manifest
	defer func() {
		if err != nil {
			d.undoAttachFill(g, ids, nm)
		}
	}()
	start := time.Now()
	reserved, path, err := d.copyAdmitted(ctx, s, pl, m, g, &ids)
	if err != nil {
		return err
	}
	copied := time.Since(start)
	start = time.Now()
	if err = s.Verify(ctx, pl, ids, att); err != nil {
		return err
	}
	verified := time.Since(start)
	var content []cacheconfig.FileContent
	if nm, content, err = d.publishedManifest(ctx, g, pl, ids, m, c.Gen.Files); err != nil {
		return err
	}
	stats := LoadStats{Bytes: pl.Bytes, AllocatedBytes: reserved, Allocations: len(pl.Allocations), Duration: copied,
		FilledFrom: fill.FilledFromPeerPrefix + c.UUID, FillFallback: fallback, FromPeer: pl.Bytes, PeerVerify: verified}
	d.reg.SetCompare(g, registry.CompareFor(true, len(content), g.Config.EngineName))
	if err = d.install(pub, ids, nm, stats); err != nil {
		return err
	}
	d.metrics.Loaded(stats, len(pl.Tensors))
	d.log.Info("filled a publication from a peer", "generation", g.ID, "from", stats.FilledFrom, "bytes", pl.Bytes,
		"arenas", len(pl.Allocations), "path", path, "copy_s", copied.Seconds(), "verify_s", verified.Seconds(),
		"config_digest", g.Digest)
	return nil
}

// planAs plans the sibling's tensor table m with this daemon's plan
// options (plan.BuildTable), which must place every tensor as the sibling
// does (fill.SameLayout, views allowed).
func (d *Daemon) planAs(m *client.Manifest) (*plan.Plan, error) {
	pl, err := plan.BuildTable(manifestEntries(m), d.opts.Plan)
	if err != nil {
		return nil, fmt.Errorf("other layout: %w", err)
	}
	if err := fill.SameLayout(pl, m, true); err != nil {
		return nil, err
	}
	return pl, nil
}

// copyAdmitted admits pl's arenas for g (allocMu held throughout) and
// copies the sibling's arenas m into new allocations, appended to *ids;
// g's allocated bytes are what the backend reserved.
func (d *Daemon) copyAdmitted(ctx context.Context, s *fill.Sibling, pl *plan.Plan, m *client.Manifest, g *generation,
	ids *[]sdk.AllocationID) (reserved uint64, path string, err error) {
	d.allocMu.Lock()
	defer d.allocMu.Unlock()
	err = d.admit(ctx, "peer fill", pl.AllocatedBytes(), g)
	if err == nil {
		reserved, path, err = s.CopyArenas(ctx, pl, m, ids, nil)
	}
	d.reg.SetAllocated(g, reserved)
	return reserved, path, err
}

// publishedManifest exports ids and builds g's manifest as the sibling's
// publication m lays it out: its tensors' views, its metadata, its content
// records as g carries them (carriedContent of theirs, with their
// verified hub blob names), published.
func (d *Daemon) publishedManifest(ctx context.Context, g *generation, pl *plan.Plan, ids []sdk.AllocationID, m *client.Manifest,
	theirs []cacheconfig.FileContent) (*manifest, []cacheconfig.FileContent, error) {
	handles, err := d.export(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	content := carriedContent(theirs)
	nm := newManifest(d.info.DeviceUUID, d.info.Backend, g.ConfigProto, g.Digest, g.ID, pl, handles)
	views := make(map[string]*client.Layout, len(m.Tensors))
	for _, t := range m.Tensors {
		views[t.Name] = t.Layout
	}
	for _, t := range nm.tensors {
		t.Layout = tensorLayoutToProto(views[t.Name])
	}
	nm.metadata, nm.published = m.Metadata, true
	nm.content, nm.policies = cacheconfig.FilesToProto(content), cacheconfig.PolicyStrings(d.opts.ContentPolicies)
	for _, f := range content {
		if f.SHA256 != "" {
			nm.blobs.add(&daemonv1.FileSHA256{Name: f.Name, Sha256: f.SHA256})
		}
	}
	return nm, content, nil
}

// undoAttachFill frees what a failed attach fill allocated, closes its
// manifest's descriptors (nm nil: none yet) and counts g as holding
// nothing; g stays publishing for the next candidate.
func (d *Daemon) undoAttachFill(g *generation, ids []sdk.AllocationID, nm *manifest) {
	d.freeAllocs(ids)
	if nm != nil {
		nm.files.close()
	}
	d.reg.Unadmit(g)
	d.reportHeld()
}

// manifestEntries is a manifest's tensor table, as a publish of it would
// give it to the planner (a view's Length is its storage's).
func manifestEntries(m *client.Manifest) []plan.Entry {
	out := make([]plan.Entry, len(m.Tensors))
	for i, t := range m.Tensors {
		out[i] = plan.Entry{Name: t.Name, DType: t.DType, Shape: t.Shape, Length: t.Length}
		if t.Layout != nil {
			out[i].Storage = t.Layout.Storage
		}
	}
	return out
}

// carriedContent are the content records of a sibling's publication (its
// engine's source files) as the filled generation carries them. The
// sibling is on this node, so a record names a file here: one whose file
// is still the file it names (same path and identity: device, inode, size,
// mtime, ctime) is carried as it is, with the hub blob name verified for
// it; one whose file is gone or was rewritten since keeps its name, digest
// and size only, so that nothing claims a file holds bytes it may not hold
// (an engine proving its files by identity then misses and loads; one that
// hashes them compares digests).
func carriedContent(theirs []cacheconfig.FileContent) []cacheconfig.FileContent {
	out := make([]cacheconfig.FileContent, 0, len(theirs))
	for _, f := range theirs {
		fi, err := os.Stat(f.Path)
		if err != nil || f.Path == "" || safetensors.StampOf(fi) != f.Identity {
			f = cacheconfig.FileContent{Name: f.Name, Digest: f.Digest, Identity: safetensors.Stamp{Size: f.Identity.Size}}
		}
		out = append(out, f)
	}
	return out
}
