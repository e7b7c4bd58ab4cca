package launcher

import (
	"context"
	"errors"
	"time"

	"github.com/wcache/wcache/internal/procstat"
)

// serveArgs is the command line of rank's daemon: ServeCommand, plus
// --takeover with Options.Takeover.
func (g *Group) serveArgs(r Rank) []string {
	args := ServeCommand(g.o.Topology, r, g.o.ServeArgs)
	if g.o.Takeover {
		args = append(args, "--takeover")
	}
	return args
}

// HandedOver reports whether every daemon of the group handed its memory
// over to a successor (see Supervise): they run on, under another launcher.
func (g *Group) HandedOver() bool { return g.handedOver.Load() }

// setLocks records the launch locks the group holds.
func (g *Group) setLocks(l launchLocks) {
	g.locksMu.Lock()
	defer g.locksMu.Unlock()
	g.locks = l
}

// releaseLocks lets the group's launch locks go; a later lockWhenFree
// success releases at once. Idempotent.
func (g *Group) releaseLocks() {
	g.locksMu.Lock()
	defer g.locksMu.Unlock()
	g.locks.release()
	g.locks, g.locksReleased = nil, true
}

// lockWhenFree takes the launch locks of every GPU of the group in the
// background, retrying every second while the previous launcher (whose
// daemons handed over) still holds one; it gives up when the group stops.
func (g *Group) lockWhenFree() {
	go func() {
		waiting := false
		for {
			locks, err := lockLaunch(g.targets(), g.o.LaunchLock)
			g.locksMu.Lock()
			if g.locksReleased {
				g.locksMu.Unlock()
				locks.release()
				return
			}
			if err == nil {
				g.locks = locks
				g.locksMu.Unlock()
				if waiting {
					g.o.Logf("took the launch locks the previous launcher released")
				}
				return
			}
			g.locksMu.Unlock()
			if !errors.Is(err, ErrLaunchInProgress) {
				g.o.Logf("launch locks: %v; engines are unaffected, a second wcache launch on these GPUs is not refused", err)
				return
			}
			if !waiting {
				g.o.Logf("waiting for the previous launcher to release the launch locks (%v)", err)
				waiting = true
			}
			time.Sleep(time.Second)
		}
	}()
}

// targets are the group's GPUs.
func (g *Group) targets() []target {
	out := make([]target, len(g.children))
	for i, c := range g.children {
		out[i] = c.target
	}
	return out
}

// successor waits up to Options.HandoverWait for c's GPU to have a ready
// file of another live process than c (whose exit was status 0) and returns
// its pid: c handed over to it. A removed or unchanged ready file, or one
// whose process is not alive, by then means c was stopped.
func (g *Group) successor(ctx context.Context, c *child) (int, bool) {
	deadline := time.NewTimer(g.o.HandoverWait)
	defer deadline.Stop()
	tick := time.NewTicker(g.o.PollInterval)
	defer tick.Stop()
	for {
		r, err := g.o.ReadReady(c.paths.Ready)
		if err == nil && r.PID != c.pid && procstat.Inspect(r.PID, r.StartTime) == procstat.Alive {
			return r.PID, true
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return 0, false
		case <-ctx.Done():
			return 0, false
		}
	}
}
