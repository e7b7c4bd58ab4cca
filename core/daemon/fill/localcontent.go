package fill

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/hubcache"
	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/sdk/filedigest"
)

// This file is what a peer fill proves its copy against: what the LOCAL
// files are known to hold, never the source's memory or the source's
// records of its files alone (docs/peer-fill.md, "What a fill proves"). A
// sibling's or another node's arenas may have been written since they were
// loaded (a posix-shm file of the same uid, legacy CUDA IPC memory that any
// admitted client maps writable), and their digests and file records say
// nothing of that.

// How a file's content came to be known (localFile.how), for the log and
// fill_fallback.
const (
	knownByDigestCache = "digest cache"
	knownByHubBlob     = "hub blob name"
	knownByHashing     = "hashed the local file"
)

// localContent is, for every file of a checkpoint, what the daemon knows
// the local file holds before any peer byte is trusted: the user's digest
// cache entry for its identity, else the name of a trusted Hugging Face
// hub blob (hubcache.TrustedBlob), else the file's own content digest,
// hashed in the background while the peer's bytes are copied (one file at
// a time, filedigest's workers each), from begin on: a fill that finds no
// peer reads nothing. Nothing here reads a peer.
type localContent struct {
	files  map[string]*localFile
	ctx    context.Context
	cancel context.CancelFunc
	toHash []*localFile
	once   sync.Once
	done   chan struct{}
	env    Env
}

// localFile is what one file is known to hold.
type localFile struct {
	f *safetensors.File
	// digest is the content digest (sdk/filedigest) the file holds: the
	// digest cache's, or hashed; "" while hashing or for a hub blob known
	// by name only.
	digest string
	// blob is a trusted hub blob's name (the plain SHA-256 of the file),
	// set when the digest cache knows nothing.
	blob string
	// how says which of the three made it known.
	how string
	// hashed is closed when the background hash of the file ended (nil
	// when none runs); err is its error then.
	hashed chan struct{}
	err    error
}

// startLocalContent looks every file of ck up (digest cache, hub blob
// name); begin starts hashing those neither knows. Call stop when the fill
// ends, whatever its outcome.
func (e Env) startLocalContent(ctx context.Context, ck *safetensors.Checkpoint) *localContent {
	ctx, cancel := context.WithCancel(ctx)
	lc := &localContent{files: make(map[string]*localFile, len(ck.Files)), ctx: ctx, cancel: cancel, done: make(chan struct{}), env: e}
	var toHash []*localFile
	for _, f := range ck.Files {
		lf := &localFile{f: f}
		lc.files[f.Path] = lf
		if want, ok := e.DigestCache.LookupAny(f.Stamp); ok {
			lf.digest, lf.how = want, knownByDigestCache
			continue
		}
		if sum, st, ok := hubcache.TrustedBlob(f.Path, os.Geteuid()); ok && safetensors.StampOf(st) == f.Stamp {
			lf.blob, lf.how = sum, knownByHubBlob
			continue
		}
		lf.how, lf.hashed = knownByHashing, make(chan struct{})
		toHash = append(toHash, lf)
	}
	lc.toHash = toHash
	return lc
}

// begin starts hashing the files whose content is not known (once; a
// peer offers the bytes: the copy is about to start).
func (lc *localContent) begin() {
	lc.once.Do(func() {
		if len(lc.toHash) > 0 {
			lc.env.Log.Info("peer fill: hashing the local files whose content is not known, alongside the copy", "files", len(lc.toHash))
		}
		go func() {
			defer close(lc.done)
			for _, lf := range lc.toHash {
				lf.digest, lf.err = lc.env.hashLocalFile(lc.ctx, lf.f)
				close(lf.hashed)
			}
		}()
	})
}

// hashLocalFile is f's content digest, read from the file, refused when f
// is no longer the file whose header was planned (its identity changed
// meanwhile). The digest is recorded in the user's digest cache, where the
// next fill (or client) finds it.
func (e Env) hashLocalFile(ctx context.Context, f *safetensors.File) (string, error) {
	digest, err := filedigest.File(ctx, f.Path, filedigest.Options{})
	if err != nil {
		return "", err
	}
	if err := f.Changed(); err != nil {
		return "", err
	}
	e.StoreDigest(f.Path, f.Stamp, digest)
	return digest, nil
}

// StoreDigest records a digest proven to be the content of the file of
// identity id in the DigestCache (nil: nothing); a failure is logged.
func (e Env) StoreDigest(path string, id safetensors.Stamp, digest string) {
	if e.DigestCache == nil {
		return
	}
	if err := e.DigestCache.Store(id, digest); err != nil {
		e.Log.Warn("digest cache: not recorded", "file", path, "error", err)
	}
}

// RecordLoadedDigests stores the content digests of a load from the files
// (each computed from the bytes the load read, the file unchanged since)
// in the user's digest cache, so that a peer fill of another daemon of the
// node proves its copy against them without reading the files.
func (e Env) RecordLoadedDigests(content []cacheconfig.FileContent) {
	for _, c := range content {
		if c.Identity != (safetensors.Stamp{}) && c.Digest != "" {
			e.StoreDigest(c.Path, c.Identity, c.Digest)
		}
	}
}

// stop ends the background hashing and waits for it (nothing to wait for
// when begin was never called).
func (lc *localContent) stop() {
	lc.cancel()
	lc.once.Do(func() { close(lc.done) })
	<-lc.done
}

// known returns what file f is known to hold, waiting for its background
// hash if one runs.
func (lc *localContent) known(ctx context.Context, f *safetensors.File) (*localFile, error) {
	lf := lc.files[f.Path]
	if lf == nil {
		return nil, fmt.Errorf("content of %s: not a file of this load", f.Path)
	}
	if lf.hashed != nil {
		lc.begin()
		select {
		case <-lf.hashed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if lf.err != nil {
			return nil, fmt.Errorf("hash the local file %s: %w", f.Path, lf.err)
		}
	}
	return lf, nil
}

// differs reports a digest a peer recorded for file f that is not the one
// the local file is known to hold, without waiting for a hash in progress:
// the candidate can be refused before a byte moves.
func (lc *localContent) differs(f *safetensors.File, theirs string) (string, bool) {
	lf := lc.files[f.Path]
	if lf == nil || lf.hashed != nil && !poll.Closed(lf.hashed) || lf.digest == "" || theirs == "" || !filedigest.SameAlgorithm(lf.digest, theirs) {
		return "", false
	}
	return lf.digest, lf.digest != theirs
}

// proveCopy checks a copy of file f against what the local file is known
// to hold and returns the file's content record (its local identity: the
// copy IS that file's bytes). digest gives the content digest of f with
// the copy's bytes in an algorithm: the one the local file's digest is in
// (a digest cache entry of an older client may be a SHA-256 tree), else
// filedigest.Default; plain, called only for a hub blob known by name
// alone, is the plain SHA-256 of f with them (header and data in file
// order). A copy that differs is an error wrapping peer.ErrDigestMismatch
// naming both digests and how the local one is known. A copy proven by
// the blob name records its digest in the digest cache.
func (e Env) proveCopy(ctx context.Context, lc *localContent, f *safetensors.File,
	digest func(filedigest.Algorithm) (string, error), plain func() (string, error)) (cacheconfig.FileContent, error) {
	lf, err := lc.known(ctx, f)
	if err != nil {
		return cacheconfig.FileContent{}, err
	}
	alg := filedigest.Default
	if lf.digest != "" {
		if alg, err = filedigest.AlgorithmOf(lf.digest); err != nil {
			return cacheconfig.FileContent{}, fmt.Errorf("content of %s: %w", f.Path, err)
		}
	}
	got, err := digest(alg)
	if err != nil {
		return cacheconfig.FileContent{}, err
	}
	rec := cacheconfig.FileContent{Name: filepath.Base(f.Path), Path: f.Path, Digest: got, Identity: f.Stamp}
	if lf.digest != "" {
		if got != lf.digest {
			return cacheconfig.FileContent{}, fmt.Errorf("%w: the copy of %s has content %s, the local file %s (%s): the source's memory is not these files",
				peer.ErrDigestMismatch, f.Path, got, lf.digest, lf.how)
		}
		if alg != filedigest.Default {
			// Proven against an older client's digest: the record, what
			// clients prove their files against, is in the current
			// algorithm, recorded in the cache beside the old one.
			if rec.Digest, err = digest(filedigest.Default); err != nil {
				return cacheconfig.FileContent{}, err
			}
			e.StoreDigest(f.Path, f.Stamp, rec.Digest)
		}
		return rec, nil
	}
	sum, err := plain()
	if err != nil {
		return cacheconfig.FileContent{}, fmt.Errorf("content of %s: %w", f.Path, err)
	}
	if sum != lf.blob {
		return cacheconfig.FileContent{}, fmt.Errorf("%w: the copy of %s has SHA-256 %s, its hub blob name is %s: the source's memory is not these files",
			peer.ErrDigestMismatch, f.Path, sum, lf.blob)
	}
	rec.SHA256 = lf.blob
	e.StoreDigest(f.Path, f.Stamp, got)
	return rec, nil
}
