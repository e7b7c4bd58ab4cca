package daemonfile

import (
	"context"
	"fmt"

	"github.com/wcache/wcache/core/paths"
)

// Acquire makes the calling process the daemon of device p.DeviceUUID: it
// takes the identity lock (flock LOCK_EX|LOCK_NB on p.Lock, created 0600 and
// opened close-on-exec), records its pid and start time in the lock file, and
// removes stale socket and ready files — deciding exactly as Cleanup does,
// including Force takeover. Of two racing Acquires on one device, in one
// process or in two, exactly one wins; the other gets a *LiveDaemonError.
//
// The returned Lock must be held for the daemon's whole life and released
// (or simply dropped by exiting) after RemoveFiles.
func Acquire(ctx context.Context, p paths.Paths, opts CleanupOptions) (*Lock, CleanupResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, CleanupResult{Action: ActionNone}, fmt.Errorf("acquire device %s: %w", p.DeviceUUID, err)
	}
	h := &lockHandle{path: p.Lock}
	res, err := settle(ctx, p, opts, h)
	if err != nil {
		h.close()
		return nil, res, wrapUnlessLive("acquire device "+p.DeviceUUID, err)
	}
	self, err := selfRef()
	if err == nil {
		err = h.writeOwner(self)
	}
	if err != nil {
		h.close()
		return nil, res, fmt.Errorf("acquire device %s: %w", p.DeviceUUID, err)
	}
	// The normal outcome of every start, reported as what this process
	// did (it is not a conflict with another one).
	opts.logf("device %s: took the identity lock %s (pid %d)", p.DeviceUUID, p.Lock, self.PID)
	fi, err := h.f.Stat()
	if err != nil {
		h.close()
		return nil, res, fmt.Errorf("acquire device %s: stat lock file: %w", p.DeviceUUID, err)
	}
	id, _ := idOf(fi)
	return &Lock{f: h.f, path: p.Lock, id: id}, res, nil
}
