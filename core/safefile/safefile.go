// Package safefile checks that a file the daemon trusts — a backend
// plugin it runs, the certificate, key and CA bundle of its peer port, a
// Hugging Face hub blob whose name it believes — lives where only its user
// or root could have written it, as OpenSSH checks its key files:
//
//   - the file is a regular file owned by root or by the trusted user, not
//     writable by group or others;
//   - every directory the path goes through, from / down, including the
//     directories of every symbolic link followed and of the links'
//     targets, is owned by root or by that user and not writable by group
//     or others — unless it has the sticky bit (as /tmp and Kubernetes
//     volume directories have), which keeps other users from renaming or
//     replacing what they do not own;
//   - for a secret (a private key): not readable by others, nor by its
//     group — except a file owned by root when the daemon is not root,
//     which the daemon can only read through its group (a Kubernetes
//     Secret volume with fsGroup); PostgreSQL applies the same rule to its
//     server key.
//
// A failure is an *UntrustedError naming the file or directory at fault,
// its owner or mode, and what to change. It is a leaf package.
package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrUntrusted is wrapped by every *UntrustedError.
var ErrUntrusted = errors.New("file in a place others can write")

// UntrustedError says which file or directory of a path failed and why.
type UntrustedError struct {
	// File is the path checked; Path the file or directory at fault (File
	// itself, or a directory on its way).
	File, Path string
	Reason     string
}

func (e *UntrustedError) Error() string {
	if e.Path == e.File {
		return fmt.Sprintf("%s %s", e.Path, e.Reason)
	}
	return fmt.Sprintf("%s %s (on the way to %s)", e.Path, e.Reason, e.File)
}

// Unwrap returns ErrUntrusted.
func (e *UntrustedError) Unwrap() error { return ErrUntrusted }

// Rule is what a file must be besides safely placed.
type Rule struct {
	// Secret: the file holds a private key (see the package doc).
	Secret bool
	// Executable: the file must have an execute bit.
	Executable bool
}

// maxLinks bounds the symbolic links followed (as the kernel's 40).
const maxLinks = 40

// Check resolves path (symbolic links followed, as open does) and checks
// it as the package doc says, trusting root and uid (the daemon's
// effective uid, os.Geteuid(), for every caller but a test). It returns
// the resolved path and its stat. A path that does not exist, or goes
// through something that is not a directory, is the os error.
func Check(path string, uid int, r Rule) (string, fs.FileInfo, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, err
	}
	u := uint32(uid)
	if err := checkDir(path, "/", u); err != nil {
		return "", nil, err
	}
	cur, rest, links := "/", strings.Split(abs, "/"), 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur) // checked on the way down
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", nil, err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			// cur, which holds the link, was checked: only root and uid
			// could have written the link.
			if links++; links > maxLinks {
				return "", nil, &os.PathError{Op: "resolve", Path: path, Err: syscall.ELOOP}
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", nil, err
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			rest = append(strings.Split(target, "/"), rest...)
			continue
		}
		if len(rest) > 0 && !onlyDots(rest) {
			if !fi.IsDir() {
				return "", nil, &os.PathError{Op: "resolve", Path: next, Err: syscall.ENOTDIR}
			}
			if err := checkDir(path, next, u); err != nil {
				return "", nil, err
			}
			cur = next
			continue
		}
		if err := checkFile(path, next, fi, u, r); err != nil {
			return "", nil, err
		}
		return next, fi, nil
	}
	return "", nil, &os.PathError{Op: "resolve", Path: path, Err: syscall.EISDIR}
}

// onlyDots reports whether the components left are "" and "." only (a
// path ending in "/" or "/.").
func onlyDots(rest []string) bool {
	for _, c := range rest {
		if c != "" && c != "." {
			return false
		}
	}
	return true
}

// CheckDirChain checks dir and every directory above it (symbolic links
// in it resolved), as Check checks the directories on a file's way: owned
// by root or uid, not writable by group or others unless sticky.
func CheckDirChain(dir string, uid int) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	for a := real; ; a = filepath.Dir(a) {
		if err := checkDir(dir, a, uint32(uid)); err != nil {
			return err
		}
		if a == "/" || a == "." {
			return nil
		}
	}
}

// owner returns fi's uid.
func owner(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

// checkDir checks one directory on file's way.
func checkDir(file, dir string, uid uint32) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	o, ok := owner(fi)
	if !ok {
		return fmt.Errorf("inspect %s: no ownership information", dir)
	}
	mode := fi.Mode()
	switch {
	case o != 0 && o != uid:
		return &UntrustedError{File: file, Path: dir, Reason: fmt.Sprintf("is a directory owned by uid %d, neither root nor uid %d, who could replace what it holds", o, uid)}
	case mode.Perm()&0o022 != 0 && mode&fs.ModeSticky == 0:
		return &UntrustedError{File: file, Path: dir, Reason: fmt.Sprintf("is a directory writable by group or others without the sticky bit (mode %04o), "+
			"so others could replace what it holds; run chmod go-w on it", permBits(mode))}
	}
	return nil
}

// checkFile checks the file itself.
func checkFile(file, path string, fi fs.FileInfo, uid uint32, r Rule) error {
	mode := fi.Mode()
	o, ok := owner(fi)
	if !ok {
		return fmt.Errorf("inspect %s: no ownership information", path)
	}
	perm := permBits(mode)
	switch {
	case !mode.IsRegular():
		return &UntrustedError{File: file, Path: path, Reason: "is not a regular file"}
	case o != 0 && o != uid:
		return &UntrustedError{File: file, Path: path, Reason: fmt.Sprintf("is owned by uid %d, neither root nor uid %d", o, uid)}
	case perm&0o022 != 0:
		return &UntrustedError{File: file, Path: path, Reason: fmt.Sprintf("is writable by group or others (mode %04o); run chmod go-w on it", perm)}
	case r.Executable && perm&0o111 == 0:
		return &UntrustedError{File: file, Path: path, Reason: fmt.Sprintf("is not executable (mode %04o)", perm)}
	case r.Secret && perm&0o007 != 0:
		return &UntrustedError{File: file, Path: path, Reason: fmt.Sprintf("is a private key readable by others (mode %04o); run chmod 600 on it", perm)}
	case r.Secret && perm&0o070 != 0 && !(o == 0 && uid != 0):
		return &UntrustedError{File: file, Path: path, Reason: fmt.Sprintf("is a private key readable by its group (mode %04o); run chmod 600 on it "+
			"(only a key owned by root, read by a daemon that is not root, may be group-readable)", perm)}
	}
	return nil
}

// permBits is mode's permission bits with setuid, setgid and sticky, as
// chmod writes them.
func permBits(mode fs.FileMode) uint32 {
	b := uint32(mode.Perm())
	if mode&fs.ModeSetuid != 0 {
		b |= 0o4000
	}
	if mode&fs.ModeSetgid != 0 {
		b |= 0o2000
	}
	if mode&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}
