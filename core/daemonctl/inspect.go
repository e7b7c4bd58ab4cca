package daemonctl

import (
	"context"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/internal/procstat"
)

// InspectTimeout bounds asking one daemon for its status.
const InspectTimeout = 3 * time.Second

// States of a Report that the daemon did not answer itself.
const (
	StateUnreadable  = "unreadable"  // the ready file cannot be read
	StateStale       = "stale"       // the recorded process is gone
	StateUnreachable = "unreachable" // the process runs but does not answer
)

// Report is what Inspect learned about one daemon.
type Report struct {
	Found
	// Ready is the ready file (zero when State is StateUnreadable).
	Ready daemonfile.Ready
	// Process is the recorded process's state (procstat.Inspect).
	Process procstat.State
	// State is StateUnreadable, StateStale, StateUnreachable, or the
	// daemon's own ("empty", "publishing", "serving", "draining",
	// "stopping").
	State string
	// Status is the daemon's answer; nil unless it answered.
	Status *client.Status
	// Err says why the ready file was unreadable or the daemon unreachable.
	Err error
}

// Inspect reads f's ready file and, when its process is alive, asks the
// daemon for its status over its socket (within InspectTimeout). It never
// fails: what went wrong is in the Report's State and Err.
func Inspect(ctx context.Context, f Found) Report {
	rep := Report{Found: f}
	r, err := daemonfile.ReadReady(f.Paths.Ready)
	if err != nil {
		rep.State, rep.Err = StateUnreadable, err
		return rep
	}
	rep.Ready = r
	rep.Process = procstat.Inspect(r.PID, r.StartTime)
	if rep.Process != procstat.Alive {
		rep.State = StateStale
		return rep
	}
	ctx, cancel := context.WithTimeout(ctx, InspectTimeout)
	defer cancel()
	c, err := client.Dial(ctx, client.BySocket(f.Paths.Socket), client.Options{})
	if err != nil {
		rep.State, rep.Err = StateUnreachable, err
		return rep
	}
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil {
		rep.State, rep.Err = StateUnreachable, err
		return rep
	}
	rep.State, rep.Status = st.State, st
	return rep
}

// ProcessName spells a process state as wcache status shows it: alive,
// dead, zombie, reused (procstat's names, "pid reused" shortened).
func ProcessName(s procstat.State) string {
	if s == procstat.Reused {
		return "reused"
	}
	return s.String()
}
