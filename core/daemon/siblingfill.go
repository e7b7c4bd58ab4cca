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
//  3. what the local files hold (localContent): the user's digest cache
//     entry of each file's identity, else a trusted hub blob's name, else
//     the file hashed in the background while the bytes are copied; a
//     sibling whose records name another content than a file already known
//     is refused before a byte moves (siblingRecords);
//  4. Attach with the sibling generation's own config: a lease, so the
//     sibling keeps the arenas while they are copied; its manifest must
//     lay the tensors out as this load's plan does (arena count and sizes,
//     every tensor's arena, offset and length);
//  5. sdk.PeerCopy of every arena into a new allocation of this plugin;
//     then the lease is released;
//  6. check: each file's content digest computed from the COPY
//     (copiedDigest: the backend hashes the leaves where the bytes are)
//     equals what the local file is known to hold (proveCopy), never only
//     the sibling's memory or its records: its arenas may have been
//     written since it loaded them.
//
// Any failure fails the candidate (the next one is tried, then the files):
// the sibling gone, a copy error, ErrUnsupported (a backend without peer
// copies), another layout, a copy that is not the local files' content.
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
	lc := d.startLocalContent(ctx, job.ck)
	defer lc.stop()
	var reasons []string
	for _, c := range cands {
		fill, err := s.fillFrom(ctx, job, c, lc)
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
// appending the new allocations to job.g.allocs; lc is what the local
// files hold.
func (s *siblingFiller) fillFrom(ctx context.Context, job *loadJob, c siblingCandidate, lc *localContent) (peerFill, error) {
	d := s.d
	theirs, err := siblingRecords(job, c.gen.Files, lc)
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
	fill := peerFill{From: filledFromPeerPrefix + c.uuid}
	lc.begin() // the copy starts: hash the files not known, alongside
	start := time.Now()
	if fill.Reserved, fill.Path, err = s.copyArenas(ctx, job.pl, m, &job.g.allocs, d.opts.Progress); err != nil {
		return peerFill{}, err
	}
	fill.Copy = time.Since(start)
	if err := leaseHeld(att); err != nil {
		return peerFill{}, err
	}
	release() // the copy is this daemon's own memory: the proof needs no source
	start = time.Now()
	if fill.Content, err = d.proveCopies(ctx, job, lc, theirs); err != nil {
		return peerFill{}, err
	}
	fill.Verify = time.Since(start)
	return fill, nil
}

// proveCopies returns the content record of every file of job, each
// proven from the copy in job.g.allocs (copiedDigest; for a hub blob known
// by name only, the copy's plain SHA-256 too) against what the local file
// is known to hold (proveCopy). A sibling's record of the very same file
// (same path and identity) gives the hub blob name it verified from that
// file, so the background verifier does not read it again.
func (d *Daemon) proveCopies(ctx context.Context, job *loadJob, lc *localContent, theirs map[string]cacheconfig.FileContent) ([]cacheconfig.FileContent, error) {
	out := make([]cacheconfig.FileContent, 0, len(job.ck.Files))
	for _, f := range job.ck.Files {
		digest := func(alg filedigest.Algorithm) (string, error) {
			return copyDigestIn(ctx, alg, d.backend, f, job.pl, job.g.allocs)
		}
		rec, err := d.proveCopy(ctx, lc, f, digest, func() (string, error) {
			return sha256FromArenas(ctx, f, job.pl, backendReaders(ctx, d.backend, job.g.allocs))
		})
		if err != nil {
			return nil, err
		}
		if t, ok := theirs[rec.Name]; ok && rec.SHA256 == "" && t.Path == f.Path && t.Identity == f.Stamp && t.Digest == rec.Digest {
			rec.SHA256 = t.SHA256
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b cacheconfig.FileContent) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
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
	att, err = cl.AttachForCopy(actx, c.gen.Config)
	if err != nil {
		cancel()
		cl.Close()
		return nil, nil, fmt.Errorf("attach: %w", err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = att.Lease.Close()
			cl.Close()
			cancel()
		})
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
// att's lease) and freed again, and that the lease still holds. It proves
// the copy is the source's memory, nothing more: a publication's fill
// (attachfill.go) has no local files to prove against; a file load's
// proves its copy against the files (proveCopies).
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
	return leaseHeld(att)
}

// leaseHeld fails when the sibling ended att's lease (it stopped, or
// evicted the generation) while its arenas were read.
func leaseHeld(att *client.Attachment) error {
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

// siblingRecords maps the sibling's content records by file name, and
// refuses it before a byte moves when it lacks a record of a file of this
// load, or records another content for a file whose local content is
// already known (lc: the digest cache, or a hash already done). Its
// records prove nothing about its memory: the copy is proven against the
// local files afterwards (proveCopies).
func siblingRecords(job *loadJob, theirs []cacheconfig.FileContent, lc *localContent) (map[string]cacheconfig.FileContent, error) {
	byName := make(map[string]cacheconfig.FileContent, len(theirs))
	for _, f := range theirs {
		byName[f.Name] = f
	}
	if len(theirs) != len(job.ck.Files) {
		return nil, fmt.Errorf("content not proven: the sibling loaded %d files, this load has %d", len(theirs), len(job.ck.Files))
	}
	for _, f := range job.ck.Files {
		rec, ok := byName[filepath.Base(f.Path)]
		if !ok || rec.Digest == "" {
			return nil, fmt.Errorf("content not proven: the sibling has no content record of %s", f.Path)
		}
		if want, differs := lc.differs(f, rec.Digest); differs {
			return nil, fmt.Errorf("content differs: %s has digest %s (%s), the sibling's %s has %s: the sibling's bytes are not these files",
				f.Path, want, lc.files[f.Path].how, rec.Path, rec.Digest)
		}
	}
	return byName, nil
}
