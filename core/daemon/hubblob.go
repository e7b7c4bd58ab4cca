package daemon

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/hubcache"
	"github.com/wcache/wcache/core/safetensors"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// This file verifies the Hugging Face hub blob names of the files a daemon
// loaded (docs/cacheconfig.md, "Content identity"): a hub blob is named by
// the plain SHA-256 of its content, which the fill's tree digest is not. A
// client whose file is a hub blob of the same name can be proven without
// hashing once the daemon knows the name is true of the bytes it loaded.

// blobSums is a manifest's verified blob names (daemon.v1 FileSHA256),
// written by one verifier and read by attaches and Status without d.mu: a
// copy-on-write list behind an atomic pointer.
type blobSums struct {
	p atomic.Pointer[[]*daemonv1.FileSHA256]
}

// list returns the names verified so far (nil for none); never modified.
func (b *blobSums) list() []*daemonv1.FileSHA256 {
	if l := b.p.Load(); l != nil {
		return *l
	}
	return nil
}

// add records one more (the only writer is the manifest's verifier).
func (b *blobSums) add(s *daemonv1.FileSHA256) {
	l := append(slices.Clone(b.list()), s)
	b.p.Store(&l)
}

// verifyHubBlobs checks, one file at a time and in the background, the blob
// name of every file of g's content whose path resolves to a hub blob, and
// records the name (g.Manifest.blobs) when the file's plain SHA-256 is that
// name and its identity is still the one recorded at the load (so the bytes
// hashed are the bytes loaded). A name that is not the content's SHA-256 is
// never recorded (logged as a warning). It returns when every such file is
// done, or at once when ctx is cancelled (the daemon stops, or g is evicted:
// its StopVerify) or g no longer serves (checked between files).
func (d *Daemon) verifyHubBlobs(ctx context.Context, g *generation, m *manifest) {
	verified, known := 0, 0
	defer func() {
		if verified+known > 0 && ctx.Err() == nil {
			d.log.Info("hub blob names checked", "generation", g.ID, "verified", verified, "known_from_peer", known)
		}
	}()
	for _, f := range cacheconfig.FilesFromProto(m.content) {
		if ctx.Err() != nil || !d.reg.Serves(g) {
			return
		}
		if slices.ContainsFunc(m.blobs.list(), func(s *daemonv1.FileSHA256) bool { return s.GetName() == f.Name }) {
			known++ // recorded at the load (a peer fill: the peer verified this very file)
			continue
		}
		sum, resolved, ok := hubcache.BlobSHA256(f.Path)
		if !ok {
			continue
		}
		if err := verifyBlob(ctx, resolved, sum, f.Identity); err != nil {
			if !errors.Is(err, context.Canceled) {
				d.log.Warn("hub blob name not recorded", "generation", g.ID, "file", f.Name, "blob", resolved, "error", err)
			}
			continue
		}
		m.blobs.add(&daemonv1.FileSHA256{Name: f.Name, Sha256: sum})
		verified++
		d.log.Info("hub blob name verified", "generation", g.ID, "file", f.Name, "sha256", sum)
	}
}

// verifyBlob checks that the file at path still has identity id, that its
// content's SHA-256 is sum, and that it kept id while it was hashed.
func verifyBlob(ctx context.Context, path, sum string, id safetensors.Stamp) error {
	same := func() error {
		st, err := os.Stat(path)
		if err != nil {
			return err
		}
		if safetensors.StampOf(st) != id {
			return errors.New("the file is no longer the one loaded")
		}
		return nil
	}
	if err := same(); err != nil {
		return err
	}
	if err := hubcache.VerifyBlob(ctx, path, sum); err != nil {
		return err
	}
	return same()
}

// startHubBlobVerify starts verifyHubBlobs for every generation of a file
// load (loaded or taken over; a publish's content names the publisher's
// files, which the daemon did not load), each with its own context, which
// evicting the generation cancels (g.StopVerify). It returns a function that
// cancels them all and waits for them to end.
func (d *Daemon) startHubBlobVerify(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	d.reg.ForEachServing(func(g *generation) {
		m := g.Manifest
		if m == nil || m.published || len(m.content) == 0 {
			return
		}
		gctx, gcancel := context.WithCancel(ctx)
		g.StopVerify = gcancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer gcancel()
			d.verifyHubBlobs(gctx, g, m)
		}()
	})
	return func() {
		cancel()
		wg.Wait()
	}
}
