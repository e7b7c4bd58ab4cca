package client

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/safetensors"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
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
	p, err := newContentProof(files, opts, nil)
	if err != nil {
		return err
	}
	return p.check(ctx, m)
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

// AttachFiles attaches with cfg and proves that files, the checkpoint
// files the engine would load, hold the bytes the daemon serves
// (docs/cacheconfig.md, "Content identity"). nil files: those cfg.Model
// names (ModelFiles: a local directory or a cached hub id); none found,
// the attach carries no file proof and the daemon answers it only where
// the generation allows "headers". The proof (each file's identity, a
// digest the digest cache knows, a trusted hub blob's name) travels with
// the attach and the daemon checks it before a lease exists; under
// opts.Policy "hash" the files the daemon found unproven are hashed and
// the attach is made once more. The manifest is checked on this side too
// (an older daemon ignores the proof). Errors, besides Attach's: a
// *cacheconfig.ContentMismatchError (the first differing file), a
// *cacheconfig.ContentUnknownError (ErrContentUnknown: not proven, or no
// proof where the daemon requires one: load from disk), ErrPolicyRefused;
// from a daemon that checked, each also a *ContentRefusedError. On a
// client-side refusal the lease is released.
func (c *Client) AttachFiles(ctx context.Context, cfg cacheconfig.Config, files []string, opts ContentOptions) (*Attachment, error) {
	derived := files == nil
	if derived {
		var err error
		if files, err = c.proofs.modelFiles(cfg.Model); err != nil {
			return nil, fmt.Errorf("attach to %s: %w", c.socket, err)
		}
	}
	p, err := newContentProof(files, opts, c.proofs)
	if err != nil {
		return nil, fmt.Errorf("attach to %s: %w", c.socket, err)
	}
	p.derived = derived
	a, err := c.attach(ctx, cfg, p.wire())
	var refused *ContentRefusedError
	if errors.As(err, &refused) && refused.Reason == daemonv1.ContentRefused_REASON_UNKNOWN && p.policy == cacheconfig.PolicyHash {
		alg, aerr := filedigest.AlgorithmOf(refused.DaemonDigest)
		if aerr != nil {
			alg = filedigest.Default
		}
		hashed, herr := p.hash(ctx, refused.Unproven, alg)
		if herr != nil {
			return nil, fmt.Errorf("attach to %s: %w", c.socket, herr)
		}
		if hashed {
			a, err = c.attach(ctx, cfg, p.wire())
		}
	}
	if err != nil {
		return nil, err
	}
	if err := p.check(ctx, a.Manifest); err != nil {
		a.Lease.Close()
		return nil, fmt.Errorf("attach to %s: %w", c.socket, err)
	}
	return a, nil
}
