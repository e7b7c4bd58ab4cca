package fill

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

// Sibling fills a file load from a sibling daemon of the same user
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
type Sibling struct{ Env }

// Candidate is one generation of a sibling that holds the weights.
type Candidate struct {
	// UUID is the sibling's device, Socket its socket, PID its process.
	UUID, Socket string
	PID          int
	// Gen is the generation, as the sibling's Status describes it.
	Gen client.GenerationStatus
}

// FillFromPeer fills job from the first sibling candidate that works
// (steps 1 to 6 above); an error wrapping ErrNoPeer when no sibling serves
// the weights.
func (s *Sibling) FillFromPeer(ctx context.Context, job *Job) (Result, error) {
	identity, err := cacheconfig.WeightsIdentity(job.Config, cacheconfig.WeightsFromFiles)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrNoPeer, err)
	}
	cands, err := s.Candidates(ctx, identity, cacheconfig.WeightsFromFiles)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrNoPeer, err)
	}
	if len(cands) == 0 {
		return Result{}, fmt.Errorf("%w: no sibling daemon on this node serves weights identity %s", ErrNoPeer, identity)
	}
	lc := s.startLocalContent(ctx, job.Checkpoint)
	defer lc.stop()
	var reasons []string
	for _, c := range cands {
		fill, err := s.fillFrom(ctx, job, c, lc)
		if err == nil {
			return fill, nil
		}
		job.freeAllocs(s.Daemon)
		reasons = append(reasons, fmt.Sprintf("peer %s (pid %d, generation %d): %v", c.UUID, c.PID, c.Gen.Generation, err))
		if ctx.Err() != nil {
			break
		}
	}
	return Result{}, errors.New(strings.Join(reasons, "; "))
}

// Candidates lists the serving generations of kind (loaded from files, or
// published: a generation of no source) of this user's other daemons whose
// weights identity of that kind is identity, by device UUID.
func (s *Sibling) Candidates(ctx context.Context, identity string, kind cacheconfig.WeightsKind) ([]Candidate, error) {
	source := SourceFiles
	if kind == cacheconfig.WeightsPublished {
		source = ""
	}
	found, err := daemonctl.Find(s.Layout)
	if err != nil {
		return nil, err
	}
	var out []Candidate
	for _, f := range found {
		if f.UUID == s.DeviceUUID {
			continue
		}
		rep := daemonctl.Inspect(ctx, f)
		if rep.Status == nil {
			if rep.Err != nil {
				s.Log.Debug("peer fill: sibling not usable", "device", f.UUID, "state", rep.State, "error", rep.Err)
			}
			continue
		}
		if rep.Status.DeviceUUID != f.UUID {
			s.Log.Warn("peer fill: a sibling's socket answers for another device; skipped", "socket", f.Paths.Socket,
				"device", f.UUID, "answered", rep.Status.DeviceUUID)
			continue
		}
		for _, g := range rep.Status.Generations {
			if g.State != StateServing || g.Source != source {
				continue
			}
			if id, err := cacheconfig.WeightsIdentity(g.Config, kind); err != nil || id != identity {
				continue
			}
			out = append(out, Candidate{UUID: f.UUID, Socket: f.Paths.Socket, PID: rep.Status.PID, Gen: g})
		}
	}
	return out, nil
}

// fillFrom fills job from candidate c (Sibling's steps 3 to 6),
// appending the new allocations to *job.Allocs; lc is what the local
// files hold.
func (s *Sibling) fillFrom(ctx context.Context, job *Job, c Candidate, lc *localContent) (Result, error) {
	theirs, err := siblingRecords(job, c.Gen.Files, lc)
	if err != nil {
		return Result{}, err
	}
	att, release, err := s.Lease(ctx, c)
	if err != nil {
		return Result{}, err
	}
	defer release()
	m := att.Manifest
	if err := SameLayout(job.Plan, m, false); err != nil {
		return Result{}, err
	}
	fill := Result{From: FilledFromPeerPrefix + c.UUID}
	lc.begin() // the copy starts: hash the files not known, alongside
	start := time.Now()
	if fill.Reserved, fill.Path, err = s.CopyArenas(ctx, job.Plan, m, job.Allocs, s.Progress); err != nil {
		return Result{}, err
	}
	fill.Copy = time.Since(start)
	if err := leaseHeld(att); err != nil {
		return Result{}, err
	}
	release() // the copy is this daemon's own memory: the proof needs no source
	start = time.Now()
	if fill.Content, err = s.proveCopies(ctx, job, lc, theirs); err != nil {
		return Result{}, err
	}
	fill.Verify = time.Since(start)
	return fill, nil
}

// proveCopies returns the content record of every file of job, each
// proven from the copy in *job.Allocs (copiedDigest; for a hub blob known
// by name only, the copy's plain SHA-256 too) against what the local file
// is known to hold (proveCopy). A sibling's record of the very same file
// (same path and identity) gives the hub blob name it verified from that
// file, so the background verifier does not read it again.
func (e Env) proveCopies(ctx context.Context, job *Job, lc *localContent, theirs map[string]cacheconfig.FileContent) ([]cacheconfig.FileContent, error) {
	out := make([]cacheconfig.FileContent, 0, len(job.Checkpoint.Files))
	for _, f := range job.Checkpoint.Files {
		digest := func(alg filedigest.Algorithm) (string, error) {
			return copyDigestIn(ctx, alg, e.Daemon.Backend(), f, job.Plan, *job.Allocs)
		}
		rec, err := e.proveCopy(ctx, lc, f, digest, func() (string, error) {
			return sha256FromArenas(ctx, f, job.Plan, backendReaders(ctx, e.Daemon.Backend(), *job.Allocs))
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

// Lease attaches to candidate c with its generation's own config (a lease:
// the sibling keeps the arenas while they are copied) and checks that the
// manifest is of c's generation. release ends the lease and the
// connection.
func (s *Sibling) Lease(ctx context.Context, c Candidate) (att *client.Attachment, release func(), err error) {
	actx, cancel := context.WithTimeout(ctx, siblingAttachTimeout)
	cl, err := client.Dial(actx, client.BySocket(c.Socket), client.Options{
		ClientName: fmt.Sprintf("wcache serve peer fill of %s (pid %d)", s.DeviceUUID, os.Getpid())})
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("sibling gone: %w", err)
	}
	att, err = cl.AttachForCopy(actx, c.Gen.Config)
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
	if att.Manifest.Generation != c.Gen.Generation {
		release()
		return nil, nil, fmt.Errorf("the sibling now serves generation %d", att.Manifest.Generation)
	}
	return att, release, nil
}

// CopyArenas copies every arena of pl from the sibling's manifest m into a
// new allocation of this daemon's plugin (sdk.PeerCopy, the handle borrowed
// from the lease), appending each to *allocs as soon as it exists. It
// returns the bytes reserved, summed, and the copy path. progress (nil:
// none) receives the bytes copied of pl.Bytes.
func (s *Sibling) CopyArenas(ctx context.Context, pl *plan.Plan, m *client.Manifest, allocs *[]sdk.AllocationID,
	progress func(done, total uint64)) (reserved uint64, path string, err error) {
	var done uint64
	for i, a := range pl.Allocations {
		h := m.Handles[i]
		base := done
		res, err := sdk.PeerCopy(ctx, s.Daemon.Backend(), sdk.PeerCopyRequest{Ordinal: s.GPU,
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

// Verify checks that every copied arena's content digest equals its
// source's, the source imported into this plugin (its handle borrowed from
// att's lease) and freed again, and that the lease still holds. It proves
// the copy is the source's memory, nothing more: a publication's fill
// (attachfill.go) has no local files to prove against; a file load's
// proves its copy against the files (proveCopies).
func (s *Sibling) Verify(ctx context.Context, pl *plan.Plan, allocs []sdk.AllocationID, att *client.Attachment) error {
	b := s.Daemon.Backend()
	m := att.Manifest
	for i, a := range pl.Allocations {
		h := m.Handles[i]
		if ok, err := s.verifyMemfd(ctx, i, a.Bytes, allocs[i], h); ok || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		src, err := b.Import(ctx, s.GPU, sdk.Handle{Kind: h.Kind, Data: h.Data, Size: h.Size, File: h.File})
		if err != nil {
			return fmt.Errorf("verify arena %d: import the source: %w", i+1, err)
		}
		var want string
		var srcErr error
		var wg sync.WaitGroup
		wg.Go(func() { want, srcErr = peer.ArenaDigest(ctx, b, src, a.Bytes) })
		got, err := peer.ArenaDigest(ctx, b, allocs[i], a.Bytes)
		wg.Wait()
		if ferr := b.Free(context.WithoutCancel(ctx), src); ferr != nil {
			s.Log.Warn("peer fill: unmapping a verified source", "error", ferr)
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
func (s *Sibling) verifyMemfd(ctx context.Context, i int, size uint64, id sdk.AllocationID, h client.Handle) (bool, error) {
	if h.File == nil {
		return false, nil
	}
	copied, err := s.Daemon.Backend().Export(ctx, id)
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

// SameLayout checks that the sibling's manifest lays the weights out as
// pl does: as many arenas, each at least the plan's size, and every tensor
// of the plan in the same arena at the same offset with the same length,
// dtype and shape (and no other tensor). A tensor with a view layout (a
// publication's) is another layout unless views is set.
func SameLayout(pl *plan.Plan, m *client.Manifest, views bool) error {
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
func siblingRecords(job *Job, theirs []cacheconfig.FileContent, lc *localContent) (map[string]cacheconfig.FileContent, error) {
	byName := make(map[string]cacheconfig.FileContent, len(theirs))
	for _, f := range theirs {
		byName[f.Name] = f
	}
	if len(theirs) != len(job.Checkpoint.Files) {
		return nil, fmt.Errorf("content not proven: the sibling loaded %d files, this load has %d", len(theirs), len(job.Checkpoint.Files))
	}
	for _, f := range job.Checkpoint.Files {
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
