package daemonfile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/core/paths"
)

// Cleanup actions reported in CleanupResult.Action.
const (
	ActionNone         = "none"          // nothing stale, nobody running
	ActionRemovedStale = "removed-stale" // files of a dead daemon were removed
	ActionTookOver     = "took-over"     // a live daemon was terminated (Force)
)

// Defaults for CleanupOptions.
const (
	DefaultGrace = 10 * time.Second
	DefaultWait  = 30 * time.Second
)

// CleanupOptions controls Cleanup and Acquire.
type CleanupOptions struct {
	// Force terminates a live daemon instead of refusing with
	// *LiveDaemonError.
	Force bool
	// Grace is how long a SIGTERM-ed daemon may take to exit before
	// SIGKILL. Zero means DefaultGrace (10s).
	Grace time.Duration
	// Wait bounds the wait, after the signals, until the process is gone and
	// its lock is free. Zero means DefaultWait (30s). Past it the result is
	// an error wrapping ErrTakeoverTimeout.
	Wait time.Duration
	// Logf receives one line per decision (what was found, what was
	// signalled, what was removed). nil is silent.
	Logf func(format string, args ...any)
}

func (o CleanupOptions) grace() time.Duration {
	if o.Grace > 0 {
		return o.Grace
	}
	return DefaultGrace
}

func (o CleanupOptions) wait() time.Duration {
	if o.Wait > 0 {
		return o.Wait
	}
	return DefaultWait
}

func (o CleanupOptions) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

// CleanupResult says what Cleanup or Acquire did.
type CleanupResult struct {
	Action  string   // ActionNone, ActionRemovedStale or ActionTookOver
	PID     int      // the daemon that was found stale or terminated, if any
	Removed []string // files removed
}

// Cleanup makes the device's discovery files consistent without becoming the
// daemon: with nothing there it does nothing; with a live daemon it returns a
// *LiveDaemonError naming its pid and paths, unless opts.Force, in which case
// it terminates it (SIGTERM, Grace, SIGKILL), waits until the process is gone
// and its lock is free (bounded by Wait and ctx), and removes its files; with
// a dead, zombie or reused-pid daemon it removes the stale socket and ready
// files. It holds the identity lock while it removes files, so it never
// removes the files of a daemon that starts concurrently, and it releases the
// lock before returning. Lock files are left in place.
func Cleanup(ctx context.Context, p paths.Paths, opts CleanupOptions) (CleanupResult, error) {
	if err := ctx.Err(); err != nil {
		return CleanupResult{Action: ActionNone}, fmt.Errorf("cleanup device %s: %w", p.DeviceUUID, err)
	}
	present := false
	for _, f := range []string{p.Socket, p.Ready, p.Lock} {
		if _, err := os.Lstat(f); err == nil {
			present = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			return CleanupResult{Action: ActionNone}, fmt.Errorf("cleanup device %s: %w", p.DeviceUUID, err)
		}
	}
	if !present {
		opts.logf("device %s: no daemon files, nothing to clean", p.DeviceUUID)
		return CleanupResult{Action: ActionNone}, nil
	}
	h := &lockHandle{path: p.Lock}
	defer h.close()
	res, err := settle(ctx, p, opts, h)
	if err != nil {
		return res, wrapUnlessLive("cleanup device "+p.DeviceUUID, err)
	}
	return res, nil
}

// RemoveFiles removes the socket and the ready file of p, ignoring files that
// are already gone. It leaves the lock file. A daemon calls it on exit, while
// it still holds its Lock.
func RemoveFiles(p paths.Paths) error {
	var errs []error
	for _, f := range []string{p.Ready, p.Socket} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove daemon files of device %s: %w", p.DeviceUUID, err)
	}
	return nil
}

// removeStale removes a dead daemon's socket, ready file and leftover
// temporary ready files. The caller holds the identity lock. It refuses to
// remove something that cannot be ours: a non-socket at the socket path, a
// directory or device at the ready path.
func removeStale(p paths.Paths, opts CleanupOptions) ([]string, error) {
	var removed []string
	remove := func(path string, ok func(fs.FileMode) bool, want string) error {
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("inspect stale file: %w", err)
		}
		if mode := fi.Mode(); mode&fs.ModeSymlink == 0 && !ok(mode) {
			return fmt.Errorf("refusing to remove %s: it is not a %s (mode %s); check the path templates", path, want, mode)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale file: %w", err)
		}
		opts.logf("device %s: removed stale %s", p.DeviceUUID, path)
		removed = append(removed, path)
		return nil
	}
	isSocket := func(m fs.FileMode) bool { return m&fs.ModeSocket != 0 }
	if err := remove(p.Socket, isSocket, "socket"); err != nil {
		return removed, err
	}
	// The descriptor channel beside the socket (core/fdchannel).
	if err := remove(fdchannel.Path(p.Socket), isSocket, "socket"); err != nil {
		return removed, err
	}
	if err := remove(p.Ready, fs.FileMode.IsRegular, "regular file"); err != nil {
		return removed, err
	}
	temps, err := filepath.Glob(filepath.Join(filepath.Dir(p.Ready), paths.GlobEscape(tempPrefix(p.Ready))+"*"))
	if err != nil {
		return removed, fmt.Errorf("list temporary ready files: %w", err)
	}
	for _, t := range temps {
		if err := remove(t, fs.FileMode.IsRegular, "regular file"); err != nil {
			return removed, err
		}
	}
	return removed, nil
}
