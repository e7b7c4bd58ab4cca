package paths

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/wcache/wcache/core/safefile"
)

// Sentinel errors matched by errors.Is on a *PrivateDirError.
var (
	// ErrDirSymlink: the directory path is a symbolic link.
	ErrDirSymlink = errors.New("private directory is a symlink")
	// ErrNotDir: the path exists and is not a directory.
	ErrNotDir = errors.New("private directory path is not a directory")
	// ErrDirOwner: the directory is owned by another user.
	ErrDirOwner = errors.New("private directory is owned by another user")
	// ErrDirMode: the directory grants permissions to group or others.
	ErrDirMode = errors.New("private directory is accessible to group or others")
	// ErrUnsafeAncestor: a directory above it lets another user rename or
	// replace it: owned by a uid other than root and us, or writable by
	// group or others without the sticky bit.
	ErrUnsafeAncestor = errors.New("a parent of the private directory is writable by another user")
)

// PrivateDirError reports a directory that cannot hold wcache's files safely.
type PrivateDirError struct {
	Dir    string
	Detail string
	Err    error // one of the sentinels above
}

func (e *PrivateDirError) Error() string {
	return fmt.Sprintf("unsafe wcache directory %s: %s", e.Dir, e.Detail)
}

// Unwrap returns the sentinel describing the problem.
func (e *PrivateDirError) Unwrap() error { return e.Err }

// DefaultDir returns the per-user private directory for wcache's files:
// $XDG_RUNTIME_DIR/wcache when XDG_RUNTIME_DIR is set to an absolute path,
// else /tmp/wcache-<euid>. getenv nil means os.Getenv. It does not create the
// directory; see EnsurePrivateDir.
func DefaultDir(getenv func(string) string) string {
	if getenv == nil {
		getenv = os.Getenv
	}
	if xdg := getenv("XDG_RUNTIME_DIR"); xdg != "" && filepath.IsAbs(xdg) {
		return filepath.Join(xdg, "wcache")
	}
	return "/tmp/wcache-" + strconv.Itoa(os.Geteuid())
}

// EnsurePrivateDir creates dir with mode 0700 if it is absent (missing parents
// are created 0700 as well) and then verifies, without following symlinks,
// that it is a real directory, owned by the effective uid, with no permission
// bits for group or others. An existing directory is never chmod-ed: one that
// fails the checks is a *PrivateDirError (ErrDirSymlink, ErrNotDir,
// ErrDirOwner or ErrDirMode), because another user may control it.
//
// Every ancestor is checked as well, as OpenSSH checks the directories above
// its key files: after resolving symlinks in the parent path, each directory
// from the parent up to / must be owned by root or by the effective uid, and
// must not be writable by group or others unless it has the sticky bit (as
// /tmp has). Otherwise another user could rename the private directory away
// and put one of their own in its place: ErrUnsafeAncestor.
func EnsurePrivateDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("wcache directory %q: not an absolute path", dir)
	}
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return fmt.Errorf("create parent of wcache directory %s: %w", dir, err)
		}
		err = os.Mkdir(dir, 0o700)
		switch {
		case err == nil:
			// The umask may have removed owner bits; restore exactly 0700.
			// Our own new directory cannot have been swapped: it was created
			// by us inside its parent and is verified again below.
			if err := os.Chmod(dir, 0o700); err != nil {
				return fmt.Errorf("chmod wcache directory %s: %w", dir, err)
			}
		case errors.Is(err, fs.ErrExist):
			// Someone created it concurrently; verify whatever is there.
		default:
			return fmt.Errorf("create wcache directory %s: %w", dir, err)
		}
		if fi, err = os.Lstat(dir); err != nil {
			return fmt.Errorf("inspect wcache directory %s: %w", dir, err)
		}
	case err != nil:
		return fmt.Errorf("inspect wcache directory %s: %w", dir, err)
	}
	if err := verifyPrivateDir(dir, fi); err != nil {
		return err
	}
	return verifyAncestors(dir)
}

// verifyAncestors checks every directory above dir (see EnsurePrivateDir)
// with the rule of every place wcache trusts (safefile.CheckDirChain).
func verifyAncestors(dir string) error {
	err := safefile.CheckDirChain(filepath.Dir(dir), os.Geteuid())
	var ue *safefile.UntrustedError
	switch {
	case errors.As(err, &ue):
		return &PrivateDirError{Dir: dir, Err: ErrUnsafeAncestor,
			Detail: fmt.Sprintf("its parent %s %s; use a directory whose parents only root and we can write", ue.Path, ue.Reason)}
	case err != nil:
		return fmt.Errorf("inspect the parents of wcache directory %s: %w", dir, err)
	}
	return nil
}

func verifyPrivateDir(dir string, fi fs.FileInfo) error {
	mode := fi.Mode()
	if mode&fs.ModeSymlink != 0 {
		return &PrivateDirError{Dir: dir, Err: ErrDirSymlink,
			Detail: "it is a symbolic link; remove it or point the templates elsewhere"}
	}
	if !mode.IsDir() {
		return &PrivateDirError{Dir: dir, Err: ErrNotDir,
			Detail: fmt.Sprintf("it is not a directory (mode %s)", mode)}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("inspect wcache directory %s: no ownership information", dir)
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return &PrivateDirError{Dir: dir, Err: ErrDirOwner,
			Detail: fmt.Sprintf("it is owned by uid %d, not by uid %d (us); another user could replace our sockets", st.Uid, euid)}
	}
	if perm := mode.Perm(); perm&0o077 != 0 {
		return &PrivateDirError{Dir: dir, Err: ErrDirMode,
			Detail: fmt.Sprintf("its mode is %#o; it must be accessible to its owner only (chmod 700 %s)", perm, dir)}
	}
	return nil
}
