package client

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk/filedigest"
)

// DigestCache is a per-user cache of content digests keyed by file
// identity (device, inode, size, mtime, ctime): a file hashed once is not
// hashed again while it keeps its identity (any write changes its ctime).
// It is private to its user: entries are written 0600 in a 0700
// directory, and an entry (or directory) not owned by UID, or writable by
// group or others, or a symlink, is ignored, so that no other user can
// plant a digest. The zero value is unusable; see DefaultDigestCache.
//
// A file may have a digest in each algorithm (sdk/filedigest): the entry of
// its SHA256Tree digest is named by the identity alone (the form that
// clients without BLAKE3 write and read), the entry of another
// algorithm's by the identity, a dot and the algorithm ("….blake3-tree-1m"), so that entries written by older
// clients keep working and older clients skip the new ones.
type DigestCache struct {
	// Dir holds one file per identity and algorithm.
	Dir string
	// UID is the only owner trusted (DefaultDigestCache: the effective
	// uid).
	UID int
}

// DefaultDigestCache is $XDG_CACHE_HOME/wcache/digests, or
// $HOME/.cache/wcache/digests, trusted for the effective uid.
func DefaultDigestCache() (*DigestCache, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("digest cache: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return &DigestCache{Dir: filepath.Join(base, "wcache", "digests"), UID: os.Geteuid()}, nil
}

// entryName is the file name of an identity's entry in algorithm alg.
func entryName(id safetensors.Stamp, alg filedigest.Algorithm) string {
	name := fmt.Sprintf("%x-%x-%x-%x-%x", id.Dev, id.Ino, id.Size, id.MtimeNs, id.CtimeNs)
	if alg != filedigest.SHA256Tree {
		name += "." + string(alg)
	}
	return name
}

// private reports whether st is owned by c.UID and not writable by group
// or others.
func (c *DigestCache) private(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == c.UID && st.Mode().Perm()&0o022 == 0
}

// Lookup returns the digest in algorithm alg cached for id; ok false when
// there is none, or none that can be trusted.
func (c *DigestCache) Lookup(id safetensors.Stamp, alg filedigest.Algorithm) (digest string, ok bool) {
	if c == nil || c.Dir == "" || id == (safetensors.Stamp{}) {
		return "", false
	}
	if st, err := os.Lstat(c.Dir); err != nil || !st.IsDir() || !c.private(st) {
		return "", false
	}
	f, err := os.OpenFile(filepath.Join(c.Dir, entryName(id, alg)), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || !c.private(st) {
		return "", false
	}
	b, err := io.ReadAll(io.LimitReader(f, 256))
	if err != nil {
		return "", false
	}
	d := strings.TrimSpace(string(b))
	if got, err := filedigest.AlgorithmOf(d); err != nil || got != alg {
		return "", false
	}
	return d, true
}

// LookupAny returns the digest cached for id in the first algorithm of
// filedigest.Algorithms() that has one (Default first).
func (c *DigestCache) LookupAny(id safetensors.Stamp) (digest string, ok bool) {
	for _, alg := range filedigest.Algorithms() {
		if d, ok := c.Lookup(id, alg); ok {
			return d, true
		}
	}
	return "", false
}

// Store records digest for id, in the entry of digest's algorithm
// (atomically: a temporary file renamed into place). The directory is created 0700 when missing; one that exists and
// is not private is an error.
func (c *DigestCache) Store(id safetensors.Stamp, digest string) error {
	if c == nil || c.Dir == "" || id == (safetensors.Stamp{}) {
		return nil
	}
	alg, err := filedigest.AlgorithmOf(digest)
	if err != nil {
		return fmt.Errorf("digest cache: %w", err)
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return fmt.Errorf("digest cache: %w", err)
	}
	if st, err := os.Lstat(c.Dir); err != nil || !st.IsDir() || !c.private(st) {
		return fmt.Errorf("digest cache: %s is not a directory private to uid %d", c.Dir, c.UID)
	}
	tmp, err := os.CreateTemp(c.Dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("digest cache: %w", err)
	}
	_, werr := tmp.WriteString(digest + "\n")
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("digest cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(c.Dir, entryName(id, alg))); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("digest cache: %w", err)
	}
	return nil
}

// dir is c's directory, "" for a nil cache.
func (c *DigestCache) dir() string {
	if c == nil {
		return ""
	}
	return c.Dir
}

// dirStamp is the identity of c's directory (zero when c is nil or the
// directory is missing): storing an entry changes it.
func (c *DigestCache) dirStamp() safetensors.Stamp {
	if c == nil || c.Dir == "" {
		return safetensors.Stamp{}
	}
	st, err := os.Lstat(c.Dir)
	if err != nil {
		return safetensors.Stamp{}
	}
	return safetensors.StampOf(st)
}
