package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/hubcache"
	"github.com/wcache/wcache/core/safetensors"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
	"github.com/wcache/wcache/sdk/filedigest"
)

// ModelFiles returns the checkpoint files an attach for model proves when
// its caller names none, as the engine integrations find them: model
// itself when it is a directory here, else a hub id's snapshot in the
// local Hugging Face cache (hubcache.Resolve, no network); in it, the
// shards model.safetensors.index.json names, or without an index every
// *.safetensors file that is not hidden (safetensors.IsCheckpointFileName;
// the files checkpoint_digest covers). No header is read. It returns nil
// and no error when model names no local checkpoint (not a directory,
// not in the hub cache, no safetensors file in it): the daemon then
// decides by its policy. An unreadable directory or index is an error.
// The directory may hold more than the daemon loaded (another rank's
// pre-sharded files, --shard-pattern): an attach with derived files leaves
// those out (ContentProof.derived); every file the daemon loaded must be
// among them.
func ModelFiles(model string) ([]string, error) {
	dir, _, err := modelDir(model)
	if dir == "" || err != nil {
		return nil, err
	}
	return filesIn(model, dir)
}

// modelDir is the directory model names here (ModelFiles' rules) and its
// stat; "" and no error when it names none.
func modelDir(model string) (string, os.FileInfo, error) {
	if model == "" {
		return "", nil, nil
	}
	dir, err := hubcache.Resolve(model, nil)
	if errors.Is(err, hubcache.ErrNotCached) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return "", nil, nil
	}
	return dir, st, nil
}

// filesIn lists model's checkpoint files in its directory dir: the shards
// of its index, else its checkpoint-named files (ModelFiles).
func filesIn(model, dir string) ([]string, error) {
	index := filepath.Join(dir, safetensors.IndexFileName)
	if _, err := os.Lstat(index); err == nil {
		ix, err := safetensors.ReadIndex(index)
		if err != nil {
			return nil, err
		}
		out := make([]string, 0, len(ix.Shards()))
		for _, s := range ix.Shards() {
			out = append(out, filepath.Join(dir, s))
		}
		return out, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint files of %s: %w", model, err)
	}
	var out []string
	for _, e := range entries {
		if safetensors.IsCheckpointFileName(e.Name()) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// contentProof is what a client knows about its own files before it
// attaches: the one place where the proof an attach carries
// (AttachRequest.content) is derived, and where the client checks a
// manifest against it (check). Deriving it costs one stat per file, one
// digest-cache lookup and one realpath (a hub blob?) per file, and a
// Client's attaches keep those look-ups while the files keep their identity
// (proofCache: then one stat per file); nothing is read or hashed unless
// the policy is "hash" and the daemon asks for it (hash).
type contentProof struct {
	policy cacheconfig.Policy
	// derived: the caller named no files, they were listed from
	// cfg.Model (ModelFiles); files the daemon did not load are ignored.
	derived bool
	// files are the client's files (name, path, identity; Digest when
	// the digest cache knew it or the file was hashed), sorted by name.
	files []cacheconfig.FileContent
	// blobs maps a file's name to the SHA-256 its trusted hub blob name
	// claims (hubcache.TrustedBlob with this identity).
	blobs map[string]string
	cache *DigestCache
	opts  ContentOptions
}

// newContentProof stats files (the checkpoint files the client would
// load; two of one base name are an error: files match by name) and looks
// each one up in the digest cache and as a trusted hub blob. pc (may be
// nil) remembers those look-ups while a file keeps its identity.
func newContentProof(files []string, opts ContentOptions, pc *proofCache) (*contentProof, error) {
	p := &contentProof{policy: opts.Policy, blobs: map[string]string{}, opts: opts}
	if p.policy == "" {
		p.policy = cacheconfig.PolicyIdentity
	}
	if !opts.NoCache {
		p.cache = opts.Cache
		if p.cache == nil {
			p.cache, _ = DefaultDigestCache()
		}
	}
	if p.policy == cacheconfig.PolicyHeaders {
		return p, nil
	}
	// One stat of the digest cache's directory: none there, nothing to
	// look up for any file.
	cacheDir, lookIn := p.cache.dirStamp(), p.cache
	if cacheDir == (safetensors.Stamp{}) {
		lookIn = nil
	}
	for _, path := range files {
		st, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("content of %s: %w", path, err)
		}
		name := filepath.Base(path)
		if slices.ContainsFunc(p.files, func(f cacheconfig.FileContent) bool { return f.Name == name }) {
			return nil, fmt.Errorf("content of %s: two files named %s (clients match files by base name)", path, name)
		}
		id := safetensors.StampOf(st)
		fp, ok := pc.file(path, id, p.cache, cacheDir)
		if !ok {
			fp = fileProofOf(path, id, lookIn)
			pc.keepFile(path, fp, p.cache, cacheDir)
		}
		if fp.blob != "" {
			p.blobs[name] = fp.blob
		}
		p.files = append(p.files, fp.rec)
	}
	slices.SortFunc(p.files, func(a, b cacheconfig.FileContent) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return p, nil
}

// fileProof is what proves one file without reading it: its record (name,
// path, identity; the digest the digest cache holds for that identity)
// and the SHA-256 its trusted hub blob name claims ("" if none).
type fileProof struct {
	rec  cacheconfig.FileContent
	blob string
}

// fileProofOf looks the file at path, of identity id, up in cache (nil:
// none) and as a trusted hub blob (hubcache.TrustedBlob, whose blob must
// have that identity).
func fileProofOf(path string, id safetensors.Stamp, cache *DigestCache) fileProof {
	fp := fileProof{rec: cacheconfig.FileContent{Name: filepath.Base(path), Path: path, Identity: id}}
	if d, ok := cache.LookupAny(id); ok {
		fp.rec.Digest = d
	}
	if sum, bst, ok := hubcache.TrustedBlob(path, os.Geteuid()); ok && safetensors.StampOf(bst) == id {
		fp.blob = sum
	}
	return fp
}

// wire is the AttachRequest.content of the proof.
func (p *contentProof) wire() *daemonv1.ContentProof {
	w := &daemonv1.ContentProof{Policy: string(p.policy), Files: cacheconfig.FilesToProto(p.files), Derived: p.derived}
	for _, f := range p.files {
		if sum := p.blobs[f.Name]; sum != "" {
			w.Blobs = append(w.Blobs, &daemonv1.FileSHA256{Name: f.Name, Sha256: sum})
		}
	}
	return w
}

// hash gives the files named (those a daemon found unproven: under
// "hash", instead of a second refusal) a digest in alg (the daemon's
// records'), from the digest cache or by hashing them (then cached). A
// file whose digest is in alg already is left alone. It reports whether
// any digest changed.
func (p *contentProof) hash(ctx context.Context, names []string, alg filedigest.Algorithm) (bool, error) {
	hashed := false
	for i := range p.files {
		f := &p.files[i]
		if !slices.Contains(names, f.Name) || digestIn(f.Digest, alg) {
			continue
		}
		d, ok := p.cache.Lookup(f.Identity, alg)
		if !ok {
			var err error
			if d, err = hashFile(ctx, f.Name, f.Path, f.Identity, alg, p.opts); err != nil {
				return false, err
			}
			_ = p.cache.Store(f.Identity, d) // a cache that cannot be written: hashed again next time
		}
		f.Digest, hashed = d, true
	}
	return hashed, nil
}

// digestIn reports whether d is a content digest in algorithm alg.
func digestIn(d string, alg filedigest.Algorithm) bool {
	a, err := filedigest.AlgorithmOf(d)
	return err == nil && a == alg
}

// check decides on the client's side whether m's content records prove
// the files (client.ProveContent's rules): the daemon checks the proof
// itself, so against a daemon that did this costs no system call; against
// an older daemon that ignored the proof it is the only check (and under
// "hash" it may hash). No files named where m's policies exclude
// "headers" is a *cacheconfig.ContentUnknownError.
func (p *contentProof) check(ctx context.Context, m *Manifest) error {
	if !cacheconfig.Allows(m.ContentPolicies, p.policy) {
		return fmt.Errorf("%w: %q (the daemon allows %v)", ErrPolicyRefused, p.policy, allowed(m.ContentPolicies))
	}
	if p.policy == cacheconfig.PolicyHeaders {
		return nil
	}
	if len(p.files) == 0 {
		if cacheconfig.Allows(m.ContentPolicies, cacheconfig.PolicyHeaders) {
			return nil
		}
		return &cacheconfig.ContentUnknownError{Why: fmt.Sprintf("no checkpoint files named or found for the model, and the daemon allows %v, not \"headers\"",
			allowed(m.ContentPolicies))}
	}
	daemon := make(map[string]cacheconfig.FileContent, len(m.Files))
	for _, f := range m.Files {
		daemon[f.Name] = f
	}
	files := p.files
	if p.derived && len(m.Files) > 0 {
		files = slices.DeleteFunc(slices.Clone(p.files), func(f cacheconfig.FileContent) bool { _, ok := daemon[f.Name]; return !ok })
	}
	prove := func(name, _ string, _ safetensors.Stamp) (string, bool, error) {
		i := slices.IndexFunc(p.files, func(f cacheconfig.FileContent) bool { return f.Name == name })
		f := &p.files[i]
		if sum := p.blobs[name]; sum != "" && sum == daemon[name].SHA256 {
			return daemon[name].Digest, true, nil
		}
		// The client's digest in the algorithm of the daemon's record (an
		// older publish's or daemon's is a SHA-256 tree); a record in an
		// algorithm this build does not know proves nothing.
		alg, err := filedigest.AlgorithmOf(daemon[name].Digest)
		if err != nil {
			return "", false, nil
		}
		if digestIn(f.Digest, alg) {
			return f.Digest, true, nil
		}
		if d, ok := p.cache.Lookup(f.Identity, alg); ok {
			f.Digest = d
			return d, true, nil
		}
		if p.policy != cacheconfig.PolicyHash {
			return "", false, nil
		}
		if _, err := p.hash(ctx, []string{name}, alg); err != nil {
			return "", false, err
		}
		return f.Digest, true, nil
	}
	return cacheconfig.MatchContent(m.Files, files, prove)
}

// records is the content of every file, for a publication
// (PublishBegin.files): each digest from the digest cache or hashed now
// (cached), and each identity checked to be the one newContentProof took,
// so that what was read in between is the files' content.
func (p *contentProof) records(ctx context.Context) ([]cacheconfig.FileContent, error) {
	names := make([]string, len(p.files))
	for i, f := range p.files {
		names[i] = f.Name
	}
	if _, err := p.hash(ctx, names, filedigest.Default); err != nil {
		return nil, err
	}
	for _, f := range p.files {
		st, err := os.Stat(f.Path)
		if err != nil {
			return nil, fmt.Errorf("content of %s: %w", f.Path, err)
		}
		if safetensors.StampOf(st) != f.Identity {
			return nil, fmt.Errorf("content of %s: the file changed since it was named (before the load)", f.Path)
		}
	}
	return slices.Clone(p.files), nil
}
