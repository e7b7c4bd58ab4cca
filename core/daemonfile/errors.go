package daemonfile

import (
	"errors"
	"fmt"
)

// Sentinel errors.
var (
	// ErrLiveDaemon is matched by errors.Is for every *LiveDaemonError.
	ErrLiveDaemon = errors.New("a live wcache daemon owns this device")
	// ErrTakeoverTimeout: with Force, the old daemon did not exit or did not
	// release its lock within CleanupOptions.Wait.
	ErrTakeoverTimeout = errors.New("timed out taking over from the running daemon")
)

// LiveDaemonError reports that a live daemon owns the device: its identity
// lock is held, or the process in its ready file is running. PID is 0 when
// the holder has not recorded itself yet.
type LiveDaemonError struct {
	PID        int
	DeviceUUID string
	Socket     string
	Ready      string
	Lock       string
}

func (e *LiveDaemonError) Error() string {
	who := fmt.Sprintf("pid %d", e.PID)
	if e.PID <= 0 {
		who = "pid not recorded yet"
	}
	return fmt.Sprintf("a wcache daemon is already running for device %s (%s; socket %s, ready file %s, lock %s): "+
		"stop it with `wcache stop`, or pass --force to terminate it and take over",
		e.DeviceUUID, who, e.Socket, e.Ready, e.Lock)
}

// Unwrap lets errors.Is(err, ErrLiveDaemon) match.
func (e *LiveDaemonError) Unwrap() error { return ErrLiveDaemon }

// wrapUnlessLive adds context to err, except to a *LiveDaemonError, whose
// message already names the device and its files.
func wrapUnlessLive(context string, err error) error {
	var live *LiveDaemonError
	if errors.As(err, &live) {
		return err
	}
	return fmt.Errorf("%s: %w", context, err)
}
