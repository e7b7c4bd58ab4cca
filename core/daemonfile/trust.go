package daemonfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// A ready or lock file is only as trustworthy as its owner. wcache believes
// what such a file says only when it is owned by root or by the effective
// uid, and then only about a process running as that same owner: a file can
// vouch for processes its owner controls, never for anyone else's. Before a
// signal, the process must also be the one the kernel says holds the flock
// on the lock file (/proc/locks), which no file content can fake.

// ErrUntrustedFile is matched by errors.Is for every *UntrustedFileError.
var ErrUntrustedFile = errors.New("file owned by another user")

// UntrustedFileError reports a ready or lock file owned by a uid other than
// root and the effective uid. Such a file is never acted on: no process it
// names is signalled or reported as a daemon.
type UntrustedFileError struct {
	Path string
	UID  uint32
	// Holder is the pid that holds the flock on an untrusted lock file, or
	// 0 when it is not held or unknown.
	Holder int
}

func (e *UntrustedFileError) Error() string {
	msg := fmt.Sprintf("%s is owned by uid %d, neither root nor us (uid %d); wcache does not act on it", e.Path, e.UID, os.Geteuid())
	if e.Holder > 0 {
		msg += fmt.Sprintf(" (its lock is held by pid %d, which is not signalled, even with --force)", e.Holder)
	}
	return msg + "; remove it as its owner or as root, and keep wcache's directories private"
}

// Unwrap lets errors.Is(err, ErrUntrustedFile) match.
func (e *UntrustedFileError) Unwrap() error { return ErrUntrustedFile }

// TrustedOwner reports whether a file owned by uid may be believed: uid is
// root or the effective uid of this process.
func TrustedOwner(uid uint32) bool { return uid == 0 || int(uid) == os.Geteuid() }

// fileOwner is the owner uid of fi.
func fileOwner(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

// processUID is the effective uid of pid: the owner of /proc/<pid>.
func processUID(pid int) (uint32, error) {
	fi, err := os.Stat("/proc/" + strconv.Itoa(pid))
	if err != nil {
		return 0, err
	}
	uid, ok := fileOwner(fi)
	if !ok {
		return 0, fmt.Errorf("/proc/%d: no owner", pid)
	}
	return uid, nil
}

// runsAs reports whether the process r is alive and runs as uid.
func (r procRef) runsAs(uid uint32) bool {
	if !r.alive() {
		return false
	}
	got, err := processUID(r.PID)
	return err == nil && got == uid
}

// flockHolders returns the pids holding a flock on the file fi (granted
// locks only, from /proc/locks). The pids are as seen in this process's pid
// namespace; a holder in another namespace may appear as 0 or not at all.
func flockHolders(fi fs.FileInfo) ([]int, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, errors.New("no inode information")
	}
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return nil, fmt.Errorf("read /proc/locks: %w", err)
	}
	return parseLocks(data, unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino), nil
}

// parseLocks picks from /proc/locks the pids of granted FLOCK locks on the
// inode (major:minor:ino, the device numbers in hex). Lines are
//
//	1: FLOCK  ADVISORY  WRITE 28723 fe:00:9978449 0 EOF
//
// and waiters carry "->" after the ordinal; they are skipped.
func parseLocks(data []byte, major, minor uint32, ino uint64) []int {
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, ino)
	var pids []int
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 6 || string(f[1]) != "FLOCK" || string(f[5]) != want {
			continue
		}
		if pid, err := strconv.Atoi(string(f[4])); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}
