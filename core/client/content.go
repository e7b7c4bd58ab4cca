package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/hubcache"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk/filedigest"
)

// ContentOptions say how ProveContent proves a client's files.
type ContentOptions struct {
	// Policy is cacheconfig.PolicyIdentity when empty.
	Policy cacheconfig.Policy
	// Cache is the digest cache consulted for files whose identity is not
	// the daemon's, and written after hashing; nil: DefaultDigestCache
	// (none when it cannot be found, e.g. without a home directory).
	Cache *DigestCache
	// NoCache turns the digest cache off.
	NoCache bool
	// Progress (may be nil) reports the hashing of one file: its name,
	// the bytes hashed and the file's size.
	Progress func(name string, done, total int64)
	// Workers hash one file's leaves (default: filedigest's).
	Workers int
}

// ErrPolicyRefused: the daemon does not let its clients use the policy.
var ErrPolicyRefused = errors.New("content policy refused by the daemon")

// ProveContent checks that files (the checkpoint files the engine names)
// hold the bytes the daemon serves according to m (its Files), under
// opts.Policy: a file with the daemon's identity is proven by one stat;
// another by a Hugging Face hub blob name the daemon verified, by the
// digest cache, or (PolicyHash) by hashing it, at disk
// speed, the result cached. It returns nil, a
// *cacheconfig.ContentMismatchError naming the first differing file (by
// name), a *cacheconfig.ContentUnknownError (ErrContentUnknown: under
// PolicyIdentity a file that cannot be proven without reading it, or a
// daemon that recorded no content; load from disk), or an error wrapping
// ErrPolicyRefused. PolicyHeaders checks nothing here (the
// checkpoint_digest of the config did).
func ProveContent(ctx context.Context, m *Manifest, files []string, opts ContentOptions) error {
	policy := opts.Policy
	if policy == "" {
		policy = cacheconfig.PolicyIdentity
	}
	if !cacheconfig.Allows(m.ContentPolicies, policy) {
		return fmt.Errorf("%w: %q (the daemon allows %v)", ErrPolicyRefused, policy, allowed(m.ContentPolicies))
	}
	if policy == cacheconfig.PolicyHeaders {
		return nil
	}
	client := make([]cacheconfig.FileContent, 0, len(files))
	for _, p := range files {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("content of %s: %w", p, err)
		}
		client = append(client, cacheconfig.FileContent{Name: filepath.Base(p), Path: p, Identity: safetensors.StampOf(st)})
	}
	cache := opts.Cache
	if cache == nil && !opts.NoCache {
		cache, _ = DefaultDigestCache()
	}
	if opts.NoCache {
		cache = nil
	}
	daemon := make(map[string]cacheconfig.FileContent, len(m.Files))
	for _, f := range m.Files {
		daemon[f.Name] = f
	}
	prove := func(name, path string, id safetensors.Stamp) (string, bool, error) {
		if d, ok := hubBlobProof(daemon[name], path, id); ok {
			return d, true, nil
		}
		// The client's digest is computed (or looked up) in the
		// algorithm of the daemon's: a record of an older publish or
		// daemon (SHA256Tree) is checked as such. A record in an
		// algorithm this build does not know proves nothing.
		alg, err := filedigest.AlgorithmOf(daemon[name].Digest)
		if err != nil {
			return "", false, nil
		}
		if d, ok := cache.Lookup(id, alg); ok {
			return d, true, nil
		}
		if policy != cacheconfig.PolicyHash {
			return "", false, nil
		}
		d, err := hashFile(ctx, name, path, id, alg, opts)
		if err != nil {
			return "", false, err
		}
		// A cache that cannot be written is not fatal: the next run
		// hashes again.
		_ = cache.Store(id, d)
		return d, true, nil
	}
	return cacheconfig.MatchContent(m.Files, client, prove)
}

// hubBlobProof returns rec's digest when the client's file (path, with
// identity id) is a trusted Hugging Face hub blob (hubcache.TrustedBlob:
// owned by this user or root, not writable by others) whose name is the
// SHA-256 the daemon verified for rec: the same content, proven without
// reading it.
func hubBlobProof(rec cacheconfig.FileContent, path string, id safetensors.Stamp) (string, bool) {
	if rec.SHA256 == "" {
		return "", false
	}
	sum, st, ok := hubcache.TrustedBlob(path, os.Geteuid())
	if !ok || sum != rec.SHA256 || safetensors.StampOf(st) != id {
		return "", false
	}
	return rec.Digest, true
}

// hashFile hashes path and checks it still has identity id afterwards (a
// file written meanwhile has no single content).
func hashFile(ctx context.Context, name, path string, id safetensors.Stamp, alg filedigest.Algorithm, opts ContentOptions) (string, error) {
	var progress func(done, total int64)
	if opts.Progress != nil {
		progress = func(done, total int64) { opts.Progress(name, done, total) }
	}
	d, err := filedigest.Complete(ctx, path, id.Size, nil, filedigest.Options{Algorithm: alg, Workers: opts.Workers, Progress: progress})
	if err != nil {
		return "", err
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("content of %s: %w", path, err)
	}
	if now := safetensors.StampOf(st); now != id {
		return "", fmt.Errorf("content of %s: the file changed while it was hashed", path)
	}
	return d, nil
}

func allowed(ps []cacheconfig.Policy) []cacheconfig.Policy {
	if len(ps) == 0 {
		return cacheconfig.DefaultDaemonPolicies
	}
	return ps
}

// AttachFiles is Attach followed by ProveContent of files, the checkpoint
// files the engine would load: on any ProveContent error the lease is
// released and the error returned.
func (c *Client) AttachFiles(ctx context.Context, cfg cacheconfig.Config, files []string, opts ContentOptions) (*Attachment, error) {
	a, err := c.Attach(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := ProveContent(ctx, a.Manifest, files, opts); err != nil {
		a.Lease.Close()
		return nil, fmt.Errorf("attach to %s: %w", c.socket, err)
	}
	return a, nil
}
