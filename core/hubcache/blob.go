package hubcache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/wcache/wcache/core/safefile"
)

// BlobSHA256 returns the SHA-256 that the name of the file path resolves
// to claims, when that file is a hub blob: <cache>/models--<org>--<name>/
// blobs/<64 hex> (a snapshot's files are symlinks to these). resolved is
// the path after following every symlink. ok is false for any other file
// (and for a path that does not resolve). The name is only a claim: see
// TrustedBlob and VerifyBlob.
func BlobSHA256(path string) (sum, resolved string, ok bool) {
	// A path whose last element is no symlink keeps its name when
	// resolved: not named as a blob, it is none (one lstat, not one per
	// element).
	if st, err := os.Lstat(path); err != nil || (st.Mode()&os.ModeSymlink == 0 && !isBlobName(filepath.Base(path))) {
		return "", "", false
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", "", false
	}
	name, dir := filepath.Base(resolved), filepath.Dir(resolved)
	if !isBlobName(name) || filepath.Base(dir) != "blobs" ||
		!strings.HasPrefix(filepath.Base(filepath.Dir(dir)), "models--") {
		return "", "", false
	}
	return name, resolved, true
}

// TrustedBlob returns the SHA-256 the name of path's hub blob claims when
// the claim may be believed without hashing: only uid (whose hub client
// named it) or root could have put other bytes under the name. The blob
// is a regular file owned by uid or by root, not writable by group or
// others, and every directory on its way — the snapshot's, the link's
// target's (blobs/, models--org--name/, the cache) and every one above —
// is owned by uid or root and not writable by others unless sticky
// (core/safefile: the check trust anchors and plugins pass), so no other
// user could rename another blob, or a file of theirs, to that name. st is
// the blob's stat (its identity). ok is false for a file that is not a
// hub blob or fails a check.
func TrustedBlob(path string, uid int) (sum string, st os.FileInfo, ok bool) {
	sum, _, ok = BlobSHA256(path)
	if !ok {
		return "", nil, false
	}
	_, st, err := safefile.Check(path, uid, safefile.Rule{})
	if err != nil {
		return "", nil, false
	}
	return sum, st, true
}

// ErrBlobMismatch: a hub blob whose content's SHA-256 is not its name.
var ErrBlobMismatch = errors.New("hub blob name is not its content's SHA-256")

// VerifyBlob reads the file at path sequentially and checks that the
// SHA-256 of its content is want (lowercase hex). ctx cancels it between
// reads (1 MiB each). Errors: ErrBlobMismatch, ctx's error, a read error.
func VerifyBlob(ctx context.Context, path, want string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := f.Read(buf)
		h.Write(buf[:n])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("hash %s: %w", path, err)
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%s: %w (SHA-256 %s)", path, ErrBlobMismatch, got)
	}
	return nil
}
