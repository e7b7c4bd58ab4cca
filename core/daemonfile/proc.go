package daemonfile

import (
	"os"

	"github.com/wcache/wcache/internal/procstat"
)

// procRef identifies a process across pid reuse (procstat.StartTime).
type procRef struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

func (r procRef) alive() bool { return procstat.Inspect(r.PID, r.StartTime) == procstat.Alive }

func selfRef() (procRef, error) {
	pid := os.Getpid()
	start, err := procstat.StartTime(pid)
	if err != nil {
		return procRef{}, err
	}
	return procRef{PID: pid, StartTime: start}, nil
}
