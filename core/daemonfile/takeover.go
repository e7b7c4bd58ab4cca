package daemonfile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/internal/procstat"
)

// settle takes the identity lock in h, dealing with whoever owns the device
// first, and removes stale files. On success h holds the lock; on error the
// caller closes h.
//
// Only trusted files count (see TrustedOwner): a lock file owned by another
// uid is replaced when nobody holds it and refused (never signalled) when
// somebody does; a ready file owned by another uid names no daemon. A
// process is signalled only when the lock file, the recorded owner, the
// kernel's flock holder and the process's uid all agree.
func settle(ctx context.Context, p paths.Paths, opts CleanupOptions, h *lockHandle) (CleanupResult, error) {
	res := CleanupResult{Action: ActionNone}
	locked, lockOwner, err := h.tryTrusted(opts.logf)
	if err != nil {
		return res, err
	}
	if !locked {
		// Primary signal: the lock is held, so a daemon is alive (possibly
		// still starting, before its ready file exists).
		holder := h.owner()
		target, reported := h.provenHolder(p, opts, lockOwner, holder)
		if r, err := ReadReady(p.Ready); err == nil && reported == 0 {
			reported = r.PID
		}
		opts.logf("device %s: lock %s is held (recorded holder pid %d)", p.DeviceUUID, p.Lock, holder.PID)
		live := liveDaemon(p, reported)
		if !opts.Force || reported == os.Getpid() {
			return res, live
		}
		if err := stopAndWait(ctx, p, opts, h, target); err != nil {
			return res, err
		}
		res.Action, res.PID = ActionTookOver, reported
	} else if r, owner, err := readReady(p.Ready); err == nil {
		// Secondary signal: a live process in the ready file that does not
		// hold our lock (its lock file was deleted and recreated, or it was
		// started by a version without locks) still owns the socket — if it
		// runs as the ready file's (trusted) owner.
		ref := procRef{PID: r.PID, StartTime: r.StartTime}
		state := procstat.Inspect(ref.PID, ref.StartTime)
		opts.logf("device %s: ready file names pid %d: %s", p.DeviceUUID, r.PID, state)
		if state == procstat.Alive && r.PID != os.Getpid() {
			if !ref.runsAs(owner) {
				opts.logf("device %s: pid %d does not run as uid %d, the owner of %s; ignoring the ready file",
					p.DeviceUUID, r.PID, owner, p.Ready)
			} else {
				if !opts.Force {
					return res, liveDaemon(p, r.PID)
				}
				if err := stopAndWait(ctx, p, opts, nil, ref); err != nil {
					return res, err
				}
				res.Action = ActionTookOver
			}
		}
		res.PID = r.PID
	} else if errors.Is(err, ErrUntrustedFile) {
		opts.logf("device %s: ignoring the ready file, which names no daemon: %v", p.DeviceUUID, err)
	} else if !errors.Is(err, fs.ErrNotExist) {
		opts.logf("device %s: treating unreadable ready file as stale: %v", p.DeviceUUID, err)
	}

	removed, err := removeStale(p, opts)
	res.Removed = removed
	if err != nil {
		return res, err
	}
	if res.Action == ActionNone && len(removed) > 0 {
		res.Action = ActionRemovedStale
	}
	if res.Action == ActionNone {
		res.PID = 0
	}
	return res, nil
}

// provenHolder returns the process that may be signalled for the held lock
// in h — the zero procRef when none is proven — and the pid to report. The
// recorded owner (or, without one, the ready file's process) qualifies only
// if the kernel says it holds the flock on this very lock file, its start
// time matches, and it runs as the lock file's owner. The reported pid is
// the recorded one, else the single flock holder.
func (h *lockHandle) provenHolder(p paths.Paths, opts CleanupOptions, lockOwner uint32, recorded procRef) (procRef, int) {
	fi, err := h.f.Stat()
	if err != nil {
		opts.logf("device %s: stat lock file: %v; not signalling", p.DeviceUUID, err)
		return procRef{}, recorded.PID
	}
	holders, err := flockHolders(fi)
	if err != nil {
		opts.logf("device %s: %v; the lock holder cannot be proven, not signalling", p.DeviceUUID, err)
		return procRef{}, recorded.PID
	}
	reported := recorded.PID
	if reported == 0 && len(holders) == 1 {
		reported = holders[0]
	}
	candidate := recorded
	if candidate.PID == 0 {
		if r, err := ReadReady(p.Ready); err == nil {
			candidate = procRef{PID: r.PID, StartTime: r.StartTime}
		}
	}
	switch {
	case candidate.PID == 0:
	case !slices.Contains(holders, candidate.PID):
		opts.logf("device %s: pid %d is named as the daemon but the kernel lists %v as holding %s; not signalling it",
			p.DeviceUUID, candidate.PID, holders, p.Lock)
	case !candidate.runsAs(lockOwner):
		opts.logf("device %s: pid %d holds %s but is not alive as recorded or does not run as uid %d, the lock file's owner; not signalling it",
			p.DeviceUUID, candidate.PID, p.Lock, lockOwner)
	default:
		return candidate, reported
	}
	return procRef{}, reported
}

func liveDaemon(p paths.Paths, pid int) *LiveDaemonError {
	return &LiveDaemonError{PID: pid, DeviceUUID: p.DeviceUUID, Socket: p.Socket, Ready: p.Ready, Lock: p.Lock}
}

// stopAndWait terminates target — only if it is still the recorded process,
// and never this process — then waits until it is gone and, when h is
// non-nil, until h holds the lock. If another live process takes the lock
// meanwhile, that process is reported as a *LiveDaemonError rather than
// killed in turn.
func stopAndWait(ctx context.Context, p paths.Paths, opts CleanupOptions, h *lockHandle, target procRef) error {
	if target.PID > 0 && target.PID != os.Getpid() && target.alive() {
		opts.logf("device %s: sending SIGTERM to daemon pid %d", p.DeviceUUID, target.PID)
		if err := unix.Kill(target.PID, unix.SIGTERM); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("terminate daemon pid %d: %w", target.PID, err)
		}
		exited, err := poll.Until(ctx, opts.grace(), func() bool { return !target.alive() })
		if err != nil {
			return fmt.Errorf("terminate daemon pid %d: %w", target.PID, err)
		}
		// Re-check the start time right before SIGKILL: the pid may have
		// been reused since the SIGTERM.
		if !exited && target.alive() {
			opts.logf("device %s: daemon pid %d still running after %s, sending SIGKILL", p.DeviceUUID, target.PID, opts.grace())
			if err := unix.Kill(target.PID, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("kill daemon pid %d: %w", target.PID, err)
			}
		}
	} else if h != nil {
		opts.logf("device %s: lock holder cannot be identified safely; not signalling, waiting for the lock", p.DeviceUUID)
	}

	// A different live owner recorded while we wait took the lock in
	// between; the one recorded now (proven or not) is what we wait out.
	var recorded procRef
	if h != nil {
		recorded = h.owner()
	}
	var failure error
	done, err := poll.Until(ctx, opts.wait(), func() bool {
		if target.PID > 0 && target.alive() {
			return false
		}
		if h == nil {
			return true
		}
		locked, err := h.try()
		if err != nil {
			failure = err
			return true
		}
		if locked {
			return true
		}
		if o := h.owner(); o.PID != 0 && o != recorded && o.PID != target.PID && o.alive() {
			failure = liveDaemon(p, o.PID)
			return true
		}
		return false
	})
	if err != nil {
		return fmt.Errorf("take over from daemon pid %d: %w", target.PID, err)
	}
	if failure != nil {
		return failure
	}
	if !done {
		return fmt.Errorf("daemon pid %d did not exit and release %s within %s: %w",
			target.PID, p.Lock, opts.wait(), ErrTakeoverTimeout)
	}
	opts.logf("device %s: daemon pid %d is gone, taking over", p.DeviceUUID, target.PID)
	return nil
}
