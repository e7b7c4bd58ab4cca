package launcher

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kinds of daemon failure, wrapped by *DaemonError (errors.Is).
var (
	// ErrStartFailed: the daemon process could not be started at all.
	ErrStartFailed = errors.New("daemon did not start")
	// ErrExitedEarly: the daemon exited before its ready file named it.
	ErrExitedEarly = errors.New("daemon exited before it was ready")
	// ErrNotReady: the daemon was still not ready when the timeout passed.
	ErrNotReady = errors.New("daemon not ready in time")
	// ErrDaemonDied: a ready daemon exited while the launcher supervised it.
	ErrDaemonDied = errors.New("daemon exited while serving")
)

// ErrReadyTimeout is wrapped by *ReadyTimeoutError.
var ErrReadyTimeout = errors.New("timed out waiting for daemons to be ready")

// ErrStopIncomplete is wrapped by *StopError.
var ErrStopIncomplete = errors.New("daemons did not all stop cleanly")

// DaemonError reports one daemon that failed: which GPU and rank, how it
// ended and the last lines it printed.
type DaemonError struct {
	Rank       Rank
	DeviceUUID string
	PID        int    // 0 when it never started
	Kind       error  // ErrStartFailed, ErrExitedEarly, ErrNotReady or ErrDaemonDied
	Status     string // "exit status 1", "killed by signal killed"; "" while running
	Err        error  // the start error or the last ready-file error, if any
	Tail       []string
}

func (e *DaemonError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "daemon for %s (%s", e.Rank, e.DeviceUUID)
	if e.PID != 0 {
		fmt.Fprintf(&b, ", pid %d", e.PID)
	}
	fmt.Fprintf(&b, "): %v", e.Kind)
	if e.Status != "" {
		fmt.Fprintf(&b, ": %s", e.Status)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if len(e.Tail) > 0 {
		b.WriteString("; its last output:")
		for _, l := range e.Tail {
			b.WriteString("\n    ")
			b.WriteString(l)
		}
	}
	return b.String()
}

// Unwrap exposes both the kind and the underlying error.
func (e *DaemonError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// ReadyTimeoutError lists the daemons that were not ready when the timeout
// passed. Every daemon had been stopped when it is returned.
type ReadyTimeoutError struct {
	Timeout time.Duration
	Pending []*DaemonError
}

func (e *ReadyTimeoutError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v after %s: %d of them pending", ErrReadyTimeout, e.Timeout, len(e.Pending))
	for _, d := range e.Pending {
		b.WriteString("\n  ")
		b.WriteString(d.Error())
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrReadyTimeout) true and lets errors.As
// reach the first pending *DaemonError.
func (e *ReadyTimeoutError) Unwrap() []error {
	out := []error{ErrReadyTimeout}
	for _, d := range e.Pending {
		out = append(out, d)
	}
	return out
}

// StopError lists the daemons that did not stop cleanly: they exited with a
// non-zero status, or had to be killed after the grace period.
type StopError struct {
	Problems []string // one per daemon: "gpu 1 tp 1 pp 0 (pid 42): killed after 30s grace"
}

func (e *StopError) Error() string {
	return fmt.Sprintf("%v: %s", ErrStopIncomplete, strings.Join(e.Problems, "; "))
}

func (e *StopError) Unwrap() error { return ErrStopIncomplete }
