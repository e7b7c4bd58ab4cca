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
type DigestCache struct {
	// Dir holds one file per identity.
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

// entryName is the file name of an identity's entry.
func entryName(id safetensors.Stamp) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", id.Dev, id.Ino, id.Size, id.MtimeNs, id.CtimeNs)
}

// private reports whether st is owned by c.UID and not writable by group
// or others.
func (c *DigestCache) private(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == c.UID && st.Mode().Perm()&0o022 == 0
}

// Lookup returns the digest cached for id; ok false when there is none,
// or none that can be trusted.
func (c *DigestCache) Lookup(id safetensors.Stamp) (digest string, ok bool) {
	if c == nil || c.Dir == "" || id == (safetensors.Stamp{}) {
		return "", false
	}
	if st, err := os.Lstat(c.Dir); err != nil || !st.IsDir() || !c.private(st) {
		return "", false
	}
	f, err := os.OpenFile(filepath.Join(c.Dir, entryName(id)), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
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
	if !validDigest(d) {
		return "", false
	}
	return d, true
}

// Store records digest for id (atomically: a temporary file renamed into
// place). The directory is created 0700 when missing; one that exists and
// is not private is an error.
func (c *DigestCache) Store(id safetensors.Stamp, digest string) error {
	if c == nil || c.Dir == "" || id == (safetensors.Stamp{}) {
		return nil
	}
	if !validDigest(digest) {
		return fmt.Errorf("digest cache: %q is not a content digest", digest)
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
	if err := os.Rename(tmp.Name(), filepath.Join(c.Dir, entryName(id))); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("digest cache: %w", err)
	}
	return nil
}

// validDigest reports whether d is a filedigest digest.
func validDigest(d string) bool {
	hex, ok := strings.CutPrefix(d, filedigest.Prefix)
	if !ok || len(hex) != 64 {
		return false
	}
	for _, r := range hex {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}
