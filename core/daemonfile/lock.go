package daemonfile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/core/paths"
)

// maxLockContent bounds how much of a lock file is read for its owner.
const maxLockContent = 4096

// Lock is a held identity lock. The daemon keeps it for its whole life; the
// kernel releases it when the process exits, however it exits.
type Lock struct {
	mu    sync.Mutex
	f     *os.File
	path  string
	id    fileID            // the lock file's identity when taken
	owned map[string]fileID // files recorded by Own
}

// Path returns the lock file's path.
func (l *Lock) Path() string { return l.path }

// Release unlocks and closes the lock file. It does not delete any file (see
// the package comment). Calling it again is a no-op.
func (l *Lock) Release() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	f := l.f
	l.f, l.owned = nil, nil // the files are no longer this process's to remove
	uerr := unix.Flock(int(f.Fd()), unix.LOCK_UN)
	cerr := f.Close()
	if uerr != nil {
		return fmt.Errorf("release lock %s: %w", l.path, uerr)
	}
	if cerr != nil {
		return fmt.Errorf("release lock %s: %w", l.path, cerr)
	}
	return nil
}

// lockHandle is a lock file being acquired: open, possibly locked.
type lockHandle struct {
	path string
	f    *os.File
}

// openLockFile opens (creating 0600 if needed) the lock file without
// following a symlink at its final component, close-on-exec so that the lock
// is never inherited by a child process.
func openLockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	return f, nil
}

// try attempts to take the lock without blocking. It returns false when
// another process holds it. When the lock file was replaced between open and
// flock (someone deleted it), the lock on the old inode guards nothing, so
// try reopens the path and tries again.
func (h *lockHandle) try() (bool, error) {
	const attempts = 8
	for range attempts {
		if h.f == nil {
			f, err := openLockFile(h.path)
			if err != nil {
				return false, err
			}
			h.f = f
		}
		err := unix.Flock(int(h.f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("flock %s: %w", h.path, err)
		}
		same, err := h.isCurrent()
		if err != nil {
			return false, err
		}
		if same {
			return true, nil
		}
		h.close()
	}
	return false, fmt.Errorf("lock file %s was replaced %d times while locking it", h.path, attempts)
}

// tryTrusted is try for a lock file that must be owned by root or by us
// (TrustedOwner). It returns whether the lock was taken and the owner of
// the lock file. An untrusted lock file that nobody holds is removed and
// replaced by our own (logged); one that somebody holds is an
// *UntrustedFileError naming the holder, who is never signalled.
func (h *lockHandle) tryTrusted(logf func(string, ...any)) (bool, uint32, error) {
	const attempts = 4
	for range attempts {
		locked, err := h.try()
		if errors.Is(err, fs.ErrPermission) {
			// Not ours to open: say whose it is.
			if fi, lerr := os.Lstat(h.path); lerr == nil {
				if owner, ok := fileOwner(fi); ok && !TrustedOwner(owner) {
					return false, owner, &UntrustedFileError{Path: h.path, UID: owner}
				}
			}
		}
		if err != nil {
			return false, 0, err
		}
		fi, err := h.f.Stat()
		if err != nil {
			return false, 0, fmt.Errorf("stat lock file %s: %w", h.path, err)
		}
		owner, ok := fileOwner(fi)
		if !ok {
			return false, 0, fmt.Errorf("lock file %s: no owner information", h.path)
		}
		if TrustedOwner(owner) {
			return locked, owner, nil
		}
		if !locked {
			holder := 0
			if pids, err := flockHolders(fi); err == nil && len(pids) == 1 {
				holder = pids[0]
			}
			return false, owner, &UntrustedFileError{Path: h.path, UID: owner, Holder: holder}
		}
		// We hold it, so nobody else does: replace it with our own.
		if same, err := h.isCurrent(); err != nil {
			return false, 0, err
		} else if same {
			if err := os.Remove(h.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return false, owner, fmt.Errorf("replace lock file: %w: %w", err, &UntrustedFileError{Path: h.path, UID: owner})
			}
			logf("removed lock file %s owned by uid %d (neither root nor us); creating our own", h.path, owner)
		}
		h.close()
	}
	return false, 0, fmt.Errorf("lock file %s was replaced by another user %d times while locking it", h.path, attempts)
}

// isCurrent reports whether the open file is still the one at h.path.
func (h *lockHandle) isCurrent() (bool, error) {
	opened, err := h.f.Stat()
	if err != nil {
		return false, fmt.Errorf("stat lock file %s: %w", h.path, err)
	}
	current, err := os.Lstat(h.path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat lock file: %w", err)
	}
	return os.SameFile(opened, current), nil
}

// close closes the file, which releases the flock if held.
func (h *lockHandle) close() {
	if h.f != nil {
		h.f.Close()
		h.f = nil
	}
}

// owner returns the process recorded in the lock file by its holder. The
// zero procRef means none is recorded (yet).
func (h *lockHandle) owner() procRef {
	if h.f == nil {
		return procRef{}
	}
	buf := make([]byte, maxLockContent)
	n, err := h.f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return procRef{}
	}
	var o procRef
	if json.Unmarshal(buf[:n], &o) != nil {
		return procRef{}
	}
	return o
}

// writeOwner records o in the locked file, replacing earlier content.
func (h *lockHandle) writeOwner(o procRef) error {
	data, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encode lock owner: %w", err)
	}
	data = append(data, '\n')
	if err := h.f.Truncate(0); err != nil {
		return fmt.Errorf("write lock file %s: %w", h.path, err)
	}
	if _, err := h.f.WriteAt(data, 0); err != nil {
		return fmt.Errorf("write lock file %s: %w", h.path, err)
	}
	if err := h.f.Sync(); err != nil {
		return fmt.Errorf("write lock file %s: fsync: %w", h.path, err)
	}
	return nil
}

// Retake acquires the identity lock again (Acquire, with opts) after
// Release, into l: a daemon that released its lock to a successor that
// then failed takes it back. It forgets the files recorded by Own (the
// caller records the files it makes again). A live holder (the successor
// took the lock after all) is a *LiveDaemonError, and l stays released.
func (l *Lock) Retake(ctx context.Context, p paths.Paths, opts CleanupOptions) (CleanupResult, error) {
	n, res, err := Acquire(ctx, p, opts)
	if err != nil {
		return res, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		_ = n.f.Close() // cannot happen: Acquire would have refused
		return res, fmt.Errorf("retake lock %s: still held", l.path)
	}
	l.f, l.path, l.id, l.owned = n.f, n.path, n.id, nil
	return res, nil
}
