package daemonfile

import (
	"os"

	"github.com/wcache/wcache/sdk/procstat"
)

// ProcState is what InspectProcess learned about a recorded process
// (procstat.State).
type ProcState = procstat.State

// Process states. Only ProcAlive means the recorded process is still running;
// the others mean its files are stale.
const (
	ProcDead   = procstat.Dead   // no such process
	ProcAlive  = procstat.Alive  // running, and its start time matches
	ProcZombie = procstat.Zombie // exited but not reaped by its parent (state Z)
	ProcReused = procstat.Reused // the pid now belongs to another process
)

// ProcessStartTime returns the start time of pid (procstat.StartTime):
// field 22 of /proc/<pid>/stat, in clock ticks since boot. Together with
// the pid it identifies a process across pid reuse. A missing process is
// an error wrapping fs.ErrNotExist.
func ProcessStartTime(pid int) (uint64, error) { return procstat.StartTime(pid) }

// InspectProcess reports whether the process recorded as (pid, startTime)
// is still running (procstat.Inspect). A pid <= 0 or one without a
// readable /proc/<pid>/stat is ProcDead (with /proc mounted hidepid, other
// users' processes look dead; the identity lock still protects them). A
// different start time — including a recorded start time of 0, which never
// matches — is ProcReused. A process in state Z is ProcZombie, in state X
// ProcDead.
func InspectProcess(pid int, startTime uint64) ProcState { return procstat.Inspect(pid, startTime) }

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
