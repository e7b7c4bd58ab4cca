// Package procstat answers, from /proc/<pid>/stat, the two questions wcache
// asks about other processes: is it still running, and is it still the
// same process (its start time, which with the pid identifies a process
// across pid reuse). The file is parsed by github.com/prometheus/procfs.
//
// It is a public leaf, so that the core (daemon files, plugin socket
// folders) and plugins (the mock's allocation files) share one reader
// without importing each other. Linux only.
package procstat

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// State is what Inspect learned about a recorded process.
type State int

// Process states. Only Alive means the recorded process is still running;
// the others mean whatever it left behind is stale.
const (
	Dead   State = iota // no such process
	Alive               // running, and its start time matches
	Zombie              // exited but not reaped by its parent (state Z)
	Reused              // the pid now belongs to another process
)

func (s State) String() string {
	switch s {
	case Dead:
		return "dead"
	case Alive:
		return "alive"
	case Zombie:
		return "zombie"
	case Reused:
		return "pid reused"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// stat reads the state letter and start time of pid.
func stat(pid int) (procfs.ProcStat, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStat{}, err
	}
	return p.Stat()
}

// StartTime returns the start time of pid: field 22 of /proc/<pid>/stat,
// in clock ticks since boot. A missing process is an error wrapping
// fs.ErrNotExist; pid <= 0 is an error.
func StartTime(pid int) (uint64, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("process start time: invalid pid %d", pid)
	}
	st, err := stat(pid)
	if err != nil {
		return 0, fmt.Errorf("process start time of pid %d: %w", pid, err)
	}
	return st.Starttime, nil
}

// Inspect reports whether the process recorded as (pid, startTime) is
// still running. A pid <= 0 or one without a readable stat file is Dead
// (with /proc mounted hidepid, other users' processes look dead). A
// different start time — including a recorded start time of 0, which never
// matches — is Reused. A process in state Z is Zombie, in state X Dead.
func Inspect(pid int, startTime uint64) State {
	if pid <= 0 {
		return Dead
	}
	st, err := stat(pid)
	if err != nil {
		return Dead
	}
	switch {
	case startTime == 0 || st.Starttime != startTime:
		return Reused
	case st.State == "Z":
		return Zombie
	case st.State == "X" || st.State == "x":
		return Dead
	}
	return Alive
}

// Running reports whether pid runs, whoever it is: kill(pid, 0) does not
// answer ESRCH and the process is not a zombie. When the stat file cannot
// be read (no procfs, hidepid, a race with exit) it trusts kill(2): true.
// pid <= 0 is false.
func Running(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
		return false
	}
	st, err := stat(pid)
	if err != nil {
		return true
	}
	return st.State != "Z" && st.State != "X" && st.State != "x"
}
