package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemonctl"
	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
)

// siblingAttachTimeout bounds attaching to a sibling daemon (the copy
// itself is bounded by the load's context only).
const siblingAttachTimeout = 10 * time.Second

// siblingFiller fills a file load from a sibling daemon of the same user
// on this node whose GPU already serves the same weights (same
// cacheconfig.WeightsIdentity, kind files), device to device through this
// daemon's own plugin (sdk.PeerCopier), the sibling serving on:
//
//  1. siblings: the layout's ready files (daemonctl.Find), each believed only
//     as far as daemonfile trusts it (owned by this user or root, its
//     process alive) and reached through client.Dial's socket checks; this
//     daemon's own device is skipped;
//  2. candidates: their serving generations loaded from files with this
//     load's weights identity;
//  3. content: every file of this load must be proven to hold the
//     sibling's file's bytes (provenContent: the very file it loaded, or a
//     copy whose digest the user's digest cache holds); else it is not
//     used;
//  4. Attach with the sibling generation's own config: a lease, so the
//     sibling keeps the arenas while they are copied; its manifest must
//     lay the tensors out as this load's plan does (arena count and sizes,
//     every tensor's arena, offset and length);
//  5. sdk.PeerCopy of every arena into a new allocation of this plugin;
//  6. check: the content digest (peer.ArenaDigest: the backend's SHA-256 of
//     each 1 MiB leaf, only sums cross the plugin boundary) of each copy
//     equals the source's (imported into this plugin, read while the
//     lease holds it); then the lease is released.
//
// Any failure fails the candidate (the next one is tried, then the files):
// the sibling gone, a copy error, ErrUnsupported (a backend without peer
// copies), another layout, a digest mismatch.
type siblingFiller struct {
	d *Daemon
}

// siblingCandidate is one generation of a sibling that holds the weights.
type siblingCandidate struct {
	uuid, socket string
	pid          int
	gen          client.GenerationStatus
}

func (s *siblingFiller) fillFromPeer(ctx context.Context, job *loadJob) (peerFill, error) {
	d := s.d
	identity, err := cacheconfig.WeightsIdentity(job.g.config, cacheconfig.WeightsFromFiles)
	if err != nil {
		return peerFill{}, fmt.Errorf("%w: %v", errNoPeer, err)
	}
	cands, err := s.candidates(ctx, identity, cacheconfig.WeightsFromFiles)
	if err != nil {
		return peerFill{}, fmt.Errorf("%w: %v", errNoPeer, err)
	}
	if len(cands) == 0 {
		return peerFill{}, fmt.Errorf("%w: no sibling daemon on this node serves weights identity %s", errNoPeer, identity)
	}
	var reasons []string
	for _, c := range cands {
		fill, err := s.fillFrom(ctx, job, c)
		if err == nil {
			return fill, nil
		}
		d.freeGenAllocs(job.g)
		reasons = append(reasons, fmt.Sprintf("peer %s (pid %d, generation %d): %v", c.uuid, c.pid, c.gen.Generation, err))
		if ctx.Err() != nil {
			break
		}
	}
	return peerFill{}, errors.New(strings.Join(reasons, "; "))
}

// candidates lists the serving generations of kind (loaded from files, or
// published: a generation of no source) of this user's other daemons whose
// weights identity of that kind is identity, by device UUID.
func (s *siblingFiller) candidates(ctx context.Context, identity string, kind cacheconfig.WeightsKind) ([]siblingCandidate, error) {
	source := SourceFiles
	if kind == cacheconfig.WeightsPublished {
		source = ""
	}
	d := s.d
	found, err := daemonctl.Find(d.opts.Layout)
	if err != nil {
		return nil, err
	}
	var out []siblingCandidate
	for _, f := range found {
		if f.UUID == d.info.DeviceUUID {
			continue
		}
		rep := daemonctl.Inspect(ctx, f)
		if rep.Status == nil {
			if rep.Err != nil {
				d.log.Debug("peer fill: sibling not usable", "device", f.UUID, "state", rep.State, "error", rep.Err)
			}
			continue
		}
		if rep.Status.DeviceUUID != f.UUID {
			d.log.Warn("peer fill: a sibling's socket answers for another device; skipped", "socket", f.Paths.Socket,
				"device", f.UUID, "answered", rep.Status.DeviceUUID)
			continue
		}
		for _, g := range rep.Status.Generations {
			if g.State != StateServing.String() || g.Source != source {
				continue
			}
			if id, err := cacheconfig.WeightsIdentity(g.Config, kind); err != nil || id != identity {
				continue
			}
			out = append(out, siblingCandidate{uuid: f.UUID, socket: f.Paths.Socket, pid: rep.Status.PID, gen: g})
		}
	}
	return out, nil
}

// fillFrom fills job from candidate c (siblingFiller's steps 3 to 6),
// appending the new allocations to job.g.allocs.
func (s *siblingFiller) fillFrom(ctx context.Context, job *loadJob, c siblingCandidate) (peerFill, error) {
	d := s.d
	content, err := provenContent(job, c.gen.Files, d.opts.DigestCache)
	if err != nil {
		return peerFill{}, err
	}
	att, release, err := s.lease(ctx, c)
	if err != nil {
		return peerFill{}, err
	}
	defer release()
	m := att.Manifest
	if err := sameLayout(job.pl, m, false); err != nil {
		return peerFill{}, err
	}
	fill := peerFill{From: filledFromPeerPrefix + c.uuid, Content: content}
	start := time.Now()
	if fill.Reserved, fill.Path, err = s.copyArenas(ctx, job.pl, m, &job.g.allocs, d.opts.Progress); err != nil {
		return peerFill{}, err
	}
	fill.Copy = time.Since(start)
	start = time.Now()
	if err := s.verify(ctx, job.pl, job.g.allocs, att); err != nil {
		return peerFill{}, err
	}
	fill.Verify = time.Since(start)
	return fill, nil
}

// lease attaches to candidate c with its generation's own config (a lease:
// the sibling keeps the arenas while they are copied) and checks that the
// manifest is of c's generation. release ends the lease and the
// connection.
func (s *siblingFiller) lease(ctx context.Context, c siblingCandidate) (att *client.Attachment, release func(), err error) {
	d := s.d
	actx, cancel := context.WithTimeout(ctx, siblingAttachTimeout)
	cl, err := client.Dial(actx, client.BySocket(c.socket), client.Options{
		ClientName: fmt.Sprintf("wcache serve peer fill of %s (pid %d)", d.info.DeviceUUID, os.Getpid())})
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("sibling gone: %w", err)
	}
	att, err = cl.Attach(actx, c.gen.Config)
	if err != nil {
		cancel()
		cl.Close()
		return nil, nil, fmt.Errorf("attach: %w", err)
	}
	release = func() {
		_ = att.Lease.Close()
		cl.Close()
		cancel()
	}
	if att.Manifest.Generation != c.gen.Generation {
		release()
		return nil, nil, fmt.Errorf("the sibling now serves generation %d", att.Manifest.Generation)
	}
	return att, release, nil
}

// copyArenas copies every arena of pl from the sibling's manifest m into a
// new allocation of this daemon's plugin (sdk.PeerCopy, the handle borrowed
// from the lease), appending each to *allocs as soon as it exists. It
// returns the bytes reserved, summed, and the copy path. progress (nil:
// none) receives the bytes copied of pl.Bytes.
func (s *siblingFiller) copyArenas(ctx context.Context, pl *plan.Plan, m *client.Manifest, allocs *[]sdk.AllocationID,
	progress func(done, total uint64)) (reserved uint64, path string, err error) {
	d := s.d
	var done uint64
	for i, a := range pl.Allocations {
		h := m.Handles[i]
		base := done
		res, err := sdk.PeerCopy(ctx, d.backend, sdk.PeerCopyRequest{Ordinal: d.opts.GPU,
			Source: sdk.Handle{Kind: h.Kind, Data: h.Data, Size: h.Size, File: h.File}, Length: a.Bytes},
			func(n, _ uint64) {
				if progress != nil {
					progress(min(base+n, pl.Bytes), pl.Bytes)
				}
			})
		if err != nil {
			return reserved, path, fmt.Errorf("copy arena %d of %d: %w", i+1, len(pl.Allocations), err)
		}
		*allocs = append(*allocs, res.ID)
		reserved, path = reserved+res.Bytes, res.Stats.Path
		if res.Bytes < a.Bytes {
			return reserved, path, fmt.Errorf("copy arena %d: %d bytes reserved, %d planned", i+1, res.Bytes, a.Bytes)
		}
		done += a.Bytes
	}
	return reserved, path, nil
}

// verify checks that every copied arena's content digest equals its
// source's, the source imported into this plugin (its handle borrowed from
// att's lease) and freed again, and that the lease still holds.
func (s *siblingFiller) verify(ctx context.Context, pl *plan.Plan, allocs []sdk.AllocationID, att *client.Attachment) error {
	d := s.d
	m := att.Manifest
	for i, a := range pl.Allocations {
		h := m.Handles[i]
		if ok, err := s.verifyMemfd(ctx, i, a.Bytes, allocs[i], h); ok || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		src, err := d.backend.Import(ctx, d.opts.GPU, sdk.Handle{Kind: h.Kind, Data: h.Data, Size: h.Size, File: h.File})
		if err != nil {
			return fmt.Errorf("verify arena %d: import the source: %w", i+1, err)
		}
		var want string
		var srcErr error
		var wg sync.WaitGroup
		wg.Go(func() { want, srcErr = peer.ArenaDigest(ctx, d.backend, src, a.Bytes) })
		got, err := peer.ArenaDigest(ctx, d.backend, allocs[i], a.Bytes)
		wg.Wait()
		if ferr := d.backend.Free(context.WithoutCancel(ctx), src); ferr != nil {
			d.log.Warn("peer fill: unmapping a verified source", "error", ferr)
		}
		if err = errors.Join(err, srcErr); err != nil {
			return fmt.Errorf("verify arena %d: %w", i+1, err)
		}
		if got != want {
			return fmt.Errorf("verify arena %d: digest mismatch: the copy has %s, the sibling's arena %s", i+1, got, want)
		}
	}
	select {
	case <-att.Lease.Done():
		return fmt.Errorf("the sibling ended the lease during the copy: %v", att.Lease.Err())
	default:
	}
	return nil
}

// verifyMemfd checks arena i (size bytes, allocation id) against the
// sibling's handle h when both are memfds the daemon can read: the source's
// descriptor from the attach, the copy's from an export of it. Both are
// digested here in filedigest.Default (BLAKE3, leaves in parallel) rather
// than through the backend's Digest (SHA-256 in the plugin). ok false with
// no error: not both memfds, verify through the backend.
func (s *siblingFiller) verifyMemfd(ctx context.Context, i int, size uint64, id sdk.AllocationID, h client.Handle) (bool, error) {
	if h.File == nil {
		return false, nil
	}
	copied, err := s.d.backend.Export(ctx, id)
	if err != nil {
		return false, fmt.Errorf("verify arena %d: export the copy: %w", i+1, err)
	}
	defer closeHandleFiles([]sdk.Handle{copied})
	if copied.File == nil {
		return false, nil
	}
	var want string
	var srcErr error
	var wg sync.WaitGroup
	wg.Go(func() { want, srcErr = peer.ArenaDigestFrom(ctx, h.File, size, filedigest.Default, 0) })
	got, err := peer.ArenaDigestFrom(ctx, copied.File, size, filedigest.Default, 0)
	wg.Wait()
	if err = errors.Join(err, srcErr); err != nil {
		return true, fmt.Errorf("verify arena %d: %w", i+1, err)
	}
	if got != want {
		return true, fmt.Errorf("verify arena %d: digest mismatch: the copy has %s, the sibling's arena %s", i+1, got, want)
	}
	return true, nil
}

// sameLayout checks that the sibling's manifest lays the weights out as
// pl does: as many arenas, each at least the plan's size, and every tensor
// of the plan in the same arena at the same offset with the same length,
// dtype and shape (and no other tensor). A tensor with a view layout (a
// publication's) is another layout unless views is set.
func sameLayout(pl *plan.Plan, m *client.Manifest, views bool) error {
	if len(m.Handles) != len(pl.Allocations) {
		return fmt.Errorf("other layout: the sibling has %d arenas, this plan %d", len(m.Handles), len(pl.Allocations))
	}
	for i, a := range pl.Allocations {
		if m.Handles[i].Size < a.Bytes {
			return fmt.Errorf("other layout: the sibling's arena %d has %d bytes, this plan %d", i+1, m.Handles[i].Size, a.Bytes)
		}
	}
	if len(m.Tensors) != len(pl.Tensors) {
		return fmt.Errorf("other layout: the sibling has %d tensors, this plan %d", len(m.Tensors), len(pl.Tensors))
	}
	theirs := make(map[string]client.Tensor, len(m.Tensors))
	for _, t := range m.Tensors {
		theirs[t.Name] = t
	}
	for _, t := range pl.Tensors {
		o, ok := theirs[t.Name]
		if !ok || o.Handle != int(t.Handle) || o.Offset != t.Offset || o.Length != t.Length || o.DType != t.DType ||
			!slices.Equal(o.Shape, t.Shape) || o.Layout != nil && !views {
			return fmt.Errorf("other layout: tensor %q is placed otherwise by the sibling", t.Name)
		}
	}
	return nil
}

// provenContent returns the content record of every file of job, when
// each is proven to hold the bytes of the sibling's file of its name:
//
//   - it is the very file the sibling loaded: same path and identity
//     (device, inode, size, mtime, ctime). The sibling digested those bytes
//     as it loaded them; its record is taken as it is, with the hub blob
//     name it verified for that file, if any;
//   - or the user's digest cache (cache, nil: none) holds a digest for its
//     identity in the algorithm of the sibling's, equal to it (another copy of the same content):
//     the record names the local file with that digest.
//
// A file neither proves (another copy with no cached digest, rewritten
// since) fails the candidate: nothing is claimed for a local file that
// nothing proved. A cached digest that differs is another content.
func provenContent(job *loadJob, theirs []cacheconfig.FileContent, cache *client.DigestCache) ([]cacheconfig.FileContent, error) {
	byName := make(map[string]cacheconfig.FileContent, len(theirs))
	for _, f := range theirs {
		byName[f.Name] = f
	}
	if len(theirs) != len(job.ck.Files) {
		return nil, fmt.Errorf("content not proven: the sibling loaded %d files, this load has %d", len(theirs), len(job.ck.Files))
	}
	out := make([]cacheconfig.FileContent, 0, len(job.ck.Files))
	for _, f := range job.ck.Files {
		rec, ok := byName[filepath.Base(f.Path)]
		switch {
		case !ok || rec.Digest == "":
			return nil, fmt.Errorf("content not proven: the sibling has no content record of %s", f.Path)
		case rec.Path == f.Path && rec.Identity == f.Stamp:
			// The same file: the hub blob name the sibling verified for it
			// (SHA256) is as true here.
			out = append(out, rec)
			continue
		}
		// The cached digest in the algorithm of the sibling's record
		// (sdk/filedigest: a record of an older daemon is SHA256Tree).
		cached, ok := "", false
		if alg, err := filedigest.AlgorithmOf(rec.Digest); cache != nil && err == nil {
			cached, ok = cache.Lookup(f.Stamp, alg)
		}
		switch {
		case !ok:
			return nil, fmt.Errorf("content not proven: %s is not the file the sibling loaded (%s) and has no cached digest", f.Path, rec.Path)
		case cached != rec.Digest:
			return nil, fmt.Errorf("content differs: %s has digest %s (digest cache), the sibling's %s has %s", f.Path, cached, rec.Path, rec.Digest)
		}
		out = append(out, cacheconfig.FileContent{Name: rec.Name, Path: f.Path, Digest: cached, Identity: f.Stamp})
	}
	slices.SortFunc(out, func(a, b cacheconfig.FileContent) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
