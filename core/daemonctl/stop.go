package daemonctl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/internal/defaults"
	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/internal/procstat"
)

// StopExitWait bounds waiting for a stopped daemon's process to exit.
const StopExitWait = 60 * time.Second

// defaultDrain is the daemon's drain timeout when a caller passes 0, and
// drainRPCMargin what an RPC that lasts as long as a drain gets beyond it.
const (
	defaultDrain   = 30 * time.Second
	drainRPCMargin = 15 * time.Second
)

// GoneError says that a device has no running daemon: no ready file, or
// the process its ready file records is gone. It matches client.ErrNoDaemon.
type GoneError struct {
	DeviceUUID string
	Ready      string // the ready file's path
	// PID and Process are the recorded process and its state; PID is 0
	// when there was no ready file.
	PID     int
	Process procstat.State
}

func (e *GoneError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("device %s: no daemon (no ready file %s)", e.DeviceUUID, e.Ready)
	}
	return fmt.Sprintf("device %s: the daemon (pid %d) is gone (%s) and left stale files; run `wcache cleanup --device-uuid %s`",
		e.DeviceUUID, e.PID, ProcessName(e.Process), e.DeviceUUID)
}

// Is makes errors.Is(err, client.ErrNoDaemon) hold.
func (e *GoneError) Is(target error) bool { return target == client.ErrNoDaemon }

// Stopped is what Stop did.
type Stopped struct {
	PID    int // the daemon's process, now exited
	Leases int // leases when the stop began
}

// Stop stops the daemon of p and waits (up to StopExitWait) for its
// process to exit. force ends every lease at once; otherwise the daemon
// drains for up to timeout (0: its own drain timeout) and, if leases
// remain, refuses and keeps serving. A device without a running daemon is
// a *GoneError; a missing socket matches client.ErrNoDaemon too. Errors
// name the device.
func Stop(ctx context.Context, p paths.Paths, force bool, timeout time.Duration) (Stopped, error) {
	r, err := daemonfile.ReadReady(p.Ready)
	if errors.Is(err, fs.ErrNotExist) {
		return Stopped{}, &GoneError{DeviceUUID: p.DeviceUUID, Ready: p.Ready}
	}
	if err != nil {
		return Stopped{}, fmt.Errorf("device %s: %w", p.DeviceUUID, err)
	}
	if ps := procstat.Inspect(r.PID, r.StartTime); ps != procstat.Alive {
		return Stopped{}, &GoneError{DeviceUUID: p.DeviceUUID, Ready: p.Ready, PID: r.PID, Process: ps}
	}
	var n int
	err = drainCall(ctx, client.BySocket(p.Socket), "", timeout, func(rctx context.Context, c *client.Client) (err error) {
		if n, err = c.Stop(rctx, force, timeout); err == nil {
			err = WaitExit(ctx, r.PID, r.StartTime, StopExitWait)
		}
		if err != nil {
			return fmt.Errorf("device %s: %w", p.DeviceUUID, err)
		}
		return nil
	})
	if err != nil {
		return Stopped{}, err
	}
	return Stopped{PID: r.PID, Leases: n}, nil
}

// WaitExit polls (internal/poll) until the process recorded as (pid, start) is
// no longer alive; past limit it is an error, and so is ctx ending first.
func WaitExit(ctx context.Context, pid int, start uint64, limit time.Duration) error {
	gone, err := poll.Until(ctx, limit, func() bool { return procstat.Inspect(pid, start) != procstat.Alive })
	if err != nil {
		return err
	}
	if !gone {
		return fmt.Errorf("pid %d still running %s after it accepted the stop", pid, limit)
	}
	return nil
}

// Evicted is what Evict did.
type Evicted struct {
	Socket string // the daemon's socket
	Leases int    // leases when the evict began
	Freed  uint64 // tensor bytes freed; 0 for a daemon that was empty
	// Generations are the ids of the generations freed; Left how many the
	// daemon still holds.
	Generations []uint64
	Left        int
}

// Evict asks the daemon at t to free its weights and stay up, empty,
// draining its leases for up to timeout (0: its own drain timeout) first;
// clientName is what its status shows meanwhile. Errors are client.Dial's
// and client.Client.Evict's.
func Evict(ctx context.Context, t client.Target, clientName string, timeout time.Duration) (Evicted, error) {
	return EvictSelected(ctx, t, clientName, client.EvictSelector{}, timeout)
}

// EvictSelected is Evict of the generations sel names (a daemon holds
// several: see client.EvictSelector); the others serve on.
func EvictSelected(ctx context.Context, t client.Target, clientName string, sel client.EvictSelector, timeout time.Duration) (Evicted, error) {
	var ev Evicted
	err := drainCall(ctx, t, clientName, timeout, func(rctx context.Context, c *client.Client) error {
		r, err := c.EvictSelected(rctx, sel, timeout)
		if err != nil {
			return err
		}
		ev = Evicted{Socket: c.Socket(), Leases: r.Leases, Freed: r.Freed, Generations: r.Generations}
		if st, err := c.Status(ctx); err == nil {
			ev.Left = len(st.Generations)
		}
		return nil
	})
	if err != nil {
		return Evicted{}, err
	}
	return ev, nil
}

// drainCall dials the daemon at t as clientName and runs call on the
// connection, closed once call returns, with rctx bounding an RPC that
// lasts as long as a drain of timeout (0: the daemon's default): the drain
// plus a margin. Errors are client.Dial's and call's.
func drainCall(ctx context.Context, t client.Target, clientName string, timeout time.Duration, call func(rctx context.Context, c *client.Client) error) error {
	c, err := client.Dial(ctx, t, client.Options{ClientName: clientName})
	if err != nil {
		return err
	}
	defer c.Close()
	defaults.Positive(&timeout, defaultDrain)
	rctx, cancel := context.WithTimeout(ctx, timeout+drainRPCMargin)
	defer cancel()
	return call(rctx, c)
}
