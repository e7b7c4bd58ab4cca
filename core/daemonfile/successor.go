package daemonfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/internal/procstat"
)

// ErrSuccessorUnproven is matched by every *SuccessorError.
var ErrSuccessorUnproven = errors.New("the successor is not proven to serve")

// SuccessorError: VerifySuccessor could not see the process PID serving
// the device: What names the file or socket that says otherwise.
type SuccessorError struct {
	PID  int
	What string
	Err  error
}

func (e *SuccessorError) Error() string {
	return fmt.Sprintf("successor pid %d: %s: %v", e.PID, e.What, e.Err)
}

func (e *SuccessorError) Unwrap() []error { return []error{ErrSuccessorUnproven, e.Err} }

// successorDialTimeout bounds VerifySuccessor's connection to the socket.
const successorDialTimeout = 5 * time.Second

// VerifySuccessor checks, from what the kernel and the file system say and
// not from anything the successor tells, that process pid — running as
// this process's effective uid, with the start time it has now — serves
// the device of p:
//
//   - the identity lock: the file at p.Lock is a regular file owned by
//     this uid, the very inode at the path, and /proc/locks lists pid as
//     the only holder of its flock; the owner recorded in it is pid with
//     its start time;
//   - the socket: p.Socket is a socket owned by this uid, and a
//     connection to it reports (SO_PEERCRED) pid and this uid as the
//     process that listens;
//   - the ready file: p.Ready, read without following a symlink, is a
//     regular file owned by this uid naming pid, its start time and
//     p.Socket.
//
// A daemon that handed its memory to a successor calls it before it ends
// its leases (core/daemon/handover): a successor's word ("serving")
// alone ends nothing. It returns nil or a *SuccessorError naming the
// first check that failed.
func VerifySuccessor(p paths.Paths, pid int) error {
	uid := uint32(os.Geteuid())
	fail := func(what string, err error) error { return &SuccessorError{PID: pid, What: what, Err: err} }
	if pid <= 0 {
		// SO_PEERCRED reports 0 for a process of a PID namespace this one
		// cannot see: nothing of it can be checked.
		return fail("process", errors.New("not visible in this PID namespace: a takeover needs both daemons in one (hostPID in Kubernetes)"))
	}
	start, err := procstat.StartTime(pid)
	if err != nil {
		return fail("process", err)
	}
	if got, err := processUID(pid); err != nil || got != uid {
		return fail("process", fmt.Errorf("runs as uid %d (%v), not %d", got, err, uid))
	}
	if err := verifyLockHolder(p.Lock, pid, start, uid); err != nil {
		return fail("identity lock "+p.Lock, err)
	}
	if err := verifyListener(p.Socket, pid, uid); err != nil {
		return fail("socket "+p.Socket, err)
	}
	r, owner, err := readReady(p.Ready)
	switch {
	case err != nil:
		return fail("ready file", err)
	case owner != uid:
		return fail("ready file "+p.Ready, fmt.Errorf("owned by uid %d, not %d", owner, uid))
	case r.PID != pid || r.StartTime != start:
		return fail("ready file "+p.Ready, fmt.Errorf("names pid %d (start time %d), not %d (%d)", r.PID, r.StartTime, pid, start))
	case r.Socket != p.Socket:
		return fail("ready file "+p.Ready, fmt.Errorf("names socket %s, not %s", r.Socket, p.Socket))
	}
	return nil
}

// verifyLockHolder checks that the lock file at path is held by pid alone
// and records it.
func verifyLockHolder(path string, pid int, start uint64, uid uint32) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	if owner, ok := fileOwner(fi); !ok || owner != uid {
		return fmt.Errorf("owned by uid %d, not %d", owner, uid)
	}
	if cur, err := os.Lstat(path); err != nil || !os.SameFile(fi, cur) {
		return fmt.Errorf("replaced while read (%v)", err)
	}
	holders, err := flockHolders(fi)
	if err != nil {
		return err
	}
	if len(holders) != 1 || holders[0] != pid {
		return fmt.Errorf("the kernel lists %v as holding it, not pid %d alone", holders, pid)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxLockContent))
	if err != nil {
		return err
	}
	var o procRef
	if err := json.Unmarshal(data, &o); err != nil {
		return fmt.Errorf("records no owner: %w", err)
	}
	if o.PID != pid || o.StartTime != start {
		return fmt.Errorf("records pid %d (start time %d), not %d (%d)", o.PID, o.StartTime, pid, start)
	}
	return nil
}

// verifyListener checks that the socket at path is this uid's and that
// the process listening on it is pid.
func verifyListener(path string, pid int, uid uint32) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("not a socket (%s)", fi.Mode().Type())
	}
	if owner, ok := fileOwner(fi); !ok || owner != uid {
		return fmt.Errorf("owned by uid %d, not %d", owner, uid)
	}
	c, err := net.DialTimeout("unix", path, successorDialTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("SO_PEERCRED: %w", credErr)
	}
	if int(cred.Pid) != pid || cred.Uid != uid {
		return fmt.Errorf("pid %d (uid %d) listens on it, not %d (%d)", cred.Pid, cred.Uid, pid, uid)
	}
	return nil
}
