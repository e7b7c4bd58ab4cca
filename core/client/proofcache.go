package client

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/wcache/wcache/core/safetensors"
)

// proofCache remembers, for one Client, what deriving a content proof
// found, so that attaching to the same checkpoint again costs one stat
// per file (and two for its directory and index) instead of listing the
// directory or parsing a sharded checkpoint's index, and looking every
// file up in the digest cache and as a hub blob, on every attach.
//
// An entry holds while what it was derived from keeps its identity
// (safetensors.Stamp: device, inode, size, mtime, ctime): a model's file
// list while its directory and its index do (an entry added, removed or
// renamed changes the directory's mtime; the index is stat'ed through a
// symlink); a file's look-ups while the file does and the digest cache
// directory does (an entry stored renames into it). A checkpoint
// rewritten or replaced, a shard added, a digest cached: derived again.
// An identity taken within settle of its last change is not kept, since
// file times move in clock ticks and a change within the same tick could
// leave it equal; such files are derived on every attach until they are
// older. What is not re-checked on a hit: the ownership and modes of a
// trusted hub blob's directories (hubcache.TrustedBlob), which only their
// owner (this user or root) can change.
//
// At most maxEntries lists and files are kept; past that it starts
// over. A nil *proofCache keeps nothing and derives everything.
type proofCache struct {
	settle time.Duration
	now    func() time.Time

	mu    sync.Mutex
	lists map[string]modelList
	files map[fileKey]cachedFile
}

const (
	// proofSettle is how old (since its last change) an identity must be
	// to be kept: well above a clock tick.
	proofSettle = 2 * time.Second
	// maxEntries bounds each of a proofCache's maps.
	maxEntries = 1024
)

// modelList is a model's files (ModelFiles) and what they were listed
// from.
type modelList struct {
	dir            string
	dirID, indexID safetensors.Stamp
	files          []string
}

// fileKey is a file's path and the digest cache it was looked up in ("":
// none).
type fileKey struct{ path, cacheDir string }

// cachedFile is a file's look-ups and the identities they hold for.
type cachedFile struct {
	id, cacheDirID safetensors.Stamp
	fp             fileProof
}

func newProofCache() *proofCache {
	return &proofCache{settle: proofSettle, now: time.Now, lists: map[string]modelList{}, files: map[fileKey]cachedFile{}}
}

// settled reports whether id (zero: nothing there) last changed at least
// settle ago.
func (pc *proofCache) settled(id safetensors.Stamp) bool {
	changed := time.Unix(0, max(id.MtimeNs, id.CtimeNs))
	return id == (safetensors.Stamp{}) || pc.now().Sub(changed) >= pc.settle
}

// modelFiles is ModelFiles(model), listed again only when model's
// directory or index changed identity.
func (pc *proofCache) modelFiles(model string) ([]string, error) {
	if pc == nil {
		return ModelFiles(model)
	}
	dir, st, err := modelDir(model)
	if dir == "" || err != nil {
		return nil, err
	}
	dirID, indexID := safetensors.StampOf(st), safetensors.Stamp{}
	if ist, err := os.Stat(filepath.Join(dir, safetensors.IndexFileName)); err == nil {
		indexID = safetensors.StampOf(ist)
	}
	pc.mu.Lock()
	l, ok := pc.lists[model]
	pc.mu.Unlock()
	if ok && l.dir == dir && l.dirID == dirID && l.indexID == indexID {
		return slices.Clone(l.files), nil
	}
	files, err := filesIn(model, dir)
	if err != nil || !pc.settled(dirID) || !pc.settled(indexID) {
		return files, err
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if len(pc.lists) >= maxEntries {
		clear(pc.lists)
	}
	pc.lists[model] = modelList{dir: dir, dirID: dirID, indexID: indexID, files: slices.Clone(files)}
	return files, nil
}

// file returns the look-ups kept for path while it has identity id and
// the digest cache (nil: none) has directory identity cacheDirID.
func (pc *proofCache) file(path string, id safetensors.Stamp, cache *DigestCache, cacheDirID safetensors.Stamp) (fileProof, bool) {
	if pc == nil {
		return fileProof{}, false
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	f, ok := pc.files[fileKey{path, cache.dir()}]
	if !ok || f.id != id || f.cacheDirID != cacheDirID {
		return fileProof{}, false
	}
	return f.fp, true
}

// keepFile keeps fp, path's look-ups at identity id in cache (of
// directory identity cacheDirID), when both identities have settled.
func (pc *proofCache) keepFile(path string, fp fileProof, cache *DigestCache, cacheDirID safetensors.Stamp) {
	if pc == nil || !pc.settled(fp.rec.Identity) || !pc.settled(cacheDirID) {
		return
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if len(pc.files) >= maxEntries {
		clear(pc.files)
	}
	pc.files[fileKey{path, cache.dir()}] = cachedFile{id: fp.rec.Identity, cacheDirID: cacheDirID, fp: fp}
}
