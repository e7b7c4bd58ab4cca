package cacheconfig

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/wcache/wcache/core/safetensors"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// Policy is how a client proves that its files hold the bytes the daemon
// serves (docs/cacheconfig.md, "Content identity").
type Policy string

const (
	// PolicyIdentity (the default) accepts a file whose identity (device,
	// inode, size, mtime, ctime) is the one the daemon recorded, or whose
	// content digest is known without reading it (the per-user digest
	// cache); any other file is ErrContentUnknown: load from disk.
	PolicyIdentity Policy = "identity"
	// PolicyHash is PolicyIdentity, then hashes the files it could not
	// prove otherwise (and caches the result).
	PolicyHash Policy = "hash"
	// PolicyHeaders checks the headers only (checkpoint_digest): two
	// checkpoints with equal headers and different tensor values match.
	// Unsafe for fine-tunes; a daemon may refuse it.
	PolicyHeaders Policy = "headers"
)

// Policies lists every policy, in the order of the docs.
var Policies = []Policy{PolicyIdentity, PolicyHash, PolicyHeaders}

// DefaultDaemonPolicies are the policies a daemon that names none allows.
var DefaultDaemonPolicies = []Policy{PolicyIdentity, PolicyHash}

// ParsePolicy parses a policy name; "" is PolicyIdentity.
func ParsePolicy(s string) (Policy, error) {
	if s == "" {
		return PolicyIdentity, nil
	}
	p := Policy(strings.ToLower(strings.TrimSpace(s)))
	if !slices.Contains(Policies, p) {
		return "", fmt.Errorf("content policy %q: want identity, hash or headers", s)
	}
	return p, nil
}

// Allows reports whether a daemon whose policies are allowed (nil or empty:
// DefaultDaemonPolicies) lets a client use p.
func Allows(allowed []Policy, p Policy) bool {
	if len(allowed) == 0 {
		allowed = DefaultDaemonPolicies
	}
	return slices.Contains(allowed, p)
}

// FileContent is the content record of one file: what the daemon loaded,
// or what a client holds.
type FileContent struct {
	// Name is the file's base name (files match by name); Path where it
	// was read.
	Name, Path string
	// Digest is the content digest (sdk/filedigest).
	Digest string
	// Identity is the file's identity at the end of the load.
	Identity safetensors.Stamp
	// SHA256 is the plain SHA-256 (lowercase hex) of the content, when the
	// daemon verified that the file is a Hugging Face hub blob of that
	// name (daemon.v1 FileSHA256); "" otherwise. Not part of FileContent
	// on the wire.
	SHA256 string
}

// FileContentFromProto converts the wire message.
func FileContentFromProto(p *daemonv1.FileContent) FileContent {
	return FileContent{Name: p.GetName(), Path: p.GetPath(), Digest: p.GetDigest(), Identity: safetensors.Stamp{
		Dev: p.GetDev(), Ino: p.GetIno(), Size: p.GetSize(), MtimeNs: p.GetMtimeNs(), CtimeNs: p.GetCtimeNs()}}
}

// ToProto converts to the wire message.
func (f FileContent) ToProto() *daemonv1.FileContent {
	return &daemonv1.FileContent{Name: f.Name, Path: f.Path, Digest: f.Digest, Dev: f.Identity.Dev,
		Ino: f.Identity.Ino, Size: f.Identity.Size, MtimeNs: f.Identity.MtimeNs, CtimeNs: f.Identity.CtimeNs}
}

// FilesToProto and FilesFromProto convert lists.
func FilesToProto(fs []FileContent) []*daemonv1.FileContent {
	out := make([]*daemonv1.FileContent, len(fs))
	for i, f := range fs {
		out[i] = f.ToProto()
	}
	return out
}

// FilesFromProto converts a list (nil when empty).
func FilesFromProto(ps []*daemonv1.FileContent) []FileContent {
	var out []FileContent
	for _, p := range ps {
		out = append(out, FileContentFromProto(p))
	}
	return out
}

// FilesWithSHA256 converts files and sets each one's SHA256 from sums
// (daemon.v1 file_sha256, matched by name; a name without a file is
// dropped).
func FilesWithSHA256(files []*daemonv1.FileContent, sums []*daemonv1.FileSHA256) []FileContent {
	out := FilesFromProto(files)
	for _, s := range sums {
		for i := range out {
			if out[i].Name == s.GetName() {
				out[i].SHA256 = s.GetSha256()
			}
		}
	}
	return out
}

// PoliciesFromStrings converts the wire form; unknown names are dropped.
func PoliciesFromStrings(ss []string) []Policy {
	var out []Policy
	for _, s := range ss {
		if p, err := ParsePolicy(s); err == nil && s != "" {
			out = append(out, p)
		}
	}
	return out
}

// PolicyStrings converts to the wire form.
func PolicyStrings(ps []Policy) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}

// ErrContentMismatch is matched by every *ContentMismatchError.
var ErrContentMismatch = errors.New("content mismatch")

// ErrContentUnknown: the policy could not prove the client's files hold
// the daemon's bytes without reading them (PolicyIdentity), or the daemon
// recorded no content. Treat it as a cache miss: load from disk.
var ErrContentUnknown = errors.New("content not proven")

// ContentMismatchError names the first file (by name) whose content is not
// what the daemon serves.
type ContentMismatchError struct {
	Name string
	// Daemon and Client are the two digests ("" for a side without the
	// file); ClientPath is the client's file.
	Daemon, Client, ClientPath string
}

func (e *ContentMismatchError) Error() string {
	switch {
	case e.Daemon == "":
		return fmt.Sprintf("content mismatch: %s (%s) is not among the daemon's files", e.Name, e.ClientPath)
	case e.Client == "":
		return fmt.Sprintf("content mismatch: the daemon's file %s is not among the client's", e.Name)
	}
	return fmt.Sprintf("content mismatch: %s (%s) holds other bytes than the daemon serves: daemon %s, client %s",
		e.Name, e.ClientPath, e.Daemon, e.Client)
}

// Is matches ErrContentMismatch.
func (e *ContentMismatchError) Is(target error) bool { return target == ErrContentMismatch }

// ContentUnknownError names the first file the policy could not prove.
type ContentUnknownError struct {
	Name, ClientPath, Why string
}

func (e *ContentUnknownError) Error() string {
	if e.Name == "" {
		return "content not proven: " + e.Why
	}
	return fmt.Sprintf("content not proven: %s (%s): %s", e.Name, e.ClientPath, e.Why)
}

// Is matches ErrContentUnknown.
func (e *ContentUnknownError) Is(target error) bool { return target == ErrContentUnknown }

// ContentProver finds the digest of a client file whose identity differs
// from the daemon's record; ok false when it cannot without hashing the
// file and the policy forbids that.
type ContentProver func(name, path string, id safetensors.Stamp) (digest string, ok bool, err error)

// MatchContent decides whether the client's files (name → path and
// identity) hold the daemon's bytes: the same names, and for each, in name
// order, either the daemon's identity or a digest prove returns equal to
// the daemon's. It returns nil, a *ContentMismatchError naming the first
// differing file, a *ContentUnknownError, or prove's error. Identities
// are compared for every file before prove is called for any, so that a
// missing or extra file is reported before anything is hashed.
func MatchContent(daemon, client []FileContent, prove ContentProver) error {
	if len(daemon) == 0 {
		return &ContentUnknownError{Why: "the daemon recorded no content digest (an older daemon, or a publish without one)"}
	}
	d := map[string]FileContent{}
	for _, f := range daemon {
		d[f.Name] = f
	}
	c := map[string]FileContent{}
	for _, f := range client {
		c[f.Name] = f
	}
	names := make([]string, 0, len(d)+len(c))
	for n := range d {
		names = append(names, n)
	}
	for n := range c {
		if _, ok := d[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var unproven []string
	for _, n := range names {
		df, dok := d[n]
		cf, cok := c[n]
		switch {
		case !dok:
			return &ContentMismatchError{Name: n, Client: "present", ClientPath: cf.Path}
		case !cok:
			return &ContentMismatchError{Name: n, Daemon: df.Digest}
		case cf.Identity != df.Identity || df.Identity == (safetensors.Stamp{}):
			unproven = append(unproven, n)
		}
	}
	for _, n := range unproven {
		df, cf := d[n], c[n]
		if cf.Identity.Size != df.Identity.Size {
			return &ContentMismatchError{Name: n, Daemon: df.Digest, ClientPath: cf.Path,
				Client: fmt.Sprintf("(%d bytes, the daemon's file has %d)", cf.Identity.Size, df.Identity.Size)}
		}
		digest, ok, err := prove(n, cf.Path, cf.Identity)
		if err != nil {
			return err
		}
		if !ok {
			return &ContentUnknownError{Name: n, ClientPath: cf.Path,
				Why: "not the file the daemon loaded and no cached digest (policy \"identity\"; \"hash\" hashes it)"}
		}
		if digest != df.Digest {
			return &ContentMismatchError{Name: n, Daemon: df.Digest, Client: digest, ClientPath: cf.Path}
		}
	}
	return nil
}
