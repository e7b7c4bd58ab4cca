package daemonfile

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// ProcState is what InspectProcess learned about a recorded process.
type ProcState int

// Process states. Only ProcAlive means the recorded process is still running;
// the others mean its files are stale.
const (
	ProcDead   ProcState = iota // no such process
	ProcAlive                   // running, and its start time matches
	ProcZombie                  // exited but not reaped by its parent (state Z)
	ProcReused                  // the pid now belongs to another process
)

func (s ProcState) String() string {
	switch s {
	case ProcDead:
		return "dead"
	case ProcAlive:
		return "alive"
	case ProcZombie:
		return "zombie"
	case ProcReused:
		return "pid reused"
	}
	return "ProcState(" + strconv.Itoa(int(s)) + ")"
}

// procStat is the part of /proc/<pid>/stat wcache uses.
type procStat struct {
	state     byte   // field 3
	startTime uint64 // field 22, in clock ticks since boot
}

func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(data)
}

// parseProcStat parses "pid (comm) state f4 … f22 …". comm may contain spaces
// and parentheses, so fields are counted from the last ')'.
func parseProcStat(data []byte) (procStat, error) {
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return procStat{}, fmt.Errorf("malformed /proc stat: no ')'")
	}
	fields := bytes.Fields(data[end+1:])
	// fields[0] is field 3 (state), so field n is fields[n-3].
	const startTimeField = 22
	if len(fields) < startTimeField-2 || len(fields[0]) != 1 {
		return procStat{}, fmt.Errorf("malformed /proc stat: %d fields after comm", len(fields))
	}
	start, err := strconv.ParseUint(string(fields[startTimeField-3]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("malformed /proc stat start time: %w", err)
	}
	return procStat{state: fields[0][0], startTime: start}, nil
}

// ProcessStartTime returns the start time of pid: field 22 of
// /proc/<pid>/stat, in clock ticks since boot. Together with the pid it
// identifies a process across pid reuse. A missing process is an error
// wrapping fs.ErrNotExist.
func ProcessStartTime(pid int) (uint64, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("process start time: invalid pid %d", pid)
	}
	st, err := readProcStat(pid)
	if err != nil {
		return 0, fmt.Errorf("process start time of pid %d: %w", pid, err)
	}
	return st.startTime, nil
}

// InspectProcess reports whether the process recorded as (pid, startTime) is
// still running. A pid <= 0 or one without a readable /proc/<pid>/stat is
// ProcDead (with /proc mounted hidepid, other users' processes look dead;
// the identity lock still protects them). A different start time — including
// a recorded start time of 0, which never matches — is ProcReused. A process
// in state Z is ProcZombie, in state X ProcDead.
func InspectProcess(pid int, startTime uint64) ProcState {
	if pid <= 0 {
		return ProcDead
	}
	st, err := readProcStat(pid)
	if err != nil {
		return ProcDead
	}
	switch {
	case startTime == 0 || st.startTime != startTime:
		return ProcReused
	case st.state == 'Z':
		return ProcZombie
	case st.state == 'X' || st.state == 'x':
		return ProcDead
	}
	return ProcAlive
}

// procRef identifies a process across pid reuse.
type procRef struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

func (r procRef) alive() bool { return InspectProcess(r.PID, r.StartTime) == ProcAlive }

func selfRef() (procRef, error) {
	pid := os.Getpid()
	start, err := ProcessStartTime(pid)
	if err != nil {
		return procRef{}, err
	}
	return procRef{PID: pid, StartTime: start}, nil
}
