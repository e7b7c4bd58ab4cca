package launcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/internal/poll"
)

// ErrSameDevice: two GPU ordinals of the layout resolved to one device UUID
// (for example CUDA_VISIBLE_DEVICES listing a GPU twice).
var ErrSameDevice = errors.New("two ranks resolve to the same device")

// target is a placed rank with its device identity.
type target struct {
	rank  Rank
	uuid  string
	paths paths.Paths
}

// Launch starts one daemon per local rank of opts.Topology and returns once
// every daemon's ready file names it. In order it:
//
//  1. places the ranks (Place; *TopologyError),
//  2. resolves every GPU's UUID through opts.Devices and derives its paths
//     (ErrSameDevice when two GPUs are one device),
//  3. takes the launch lock of every GPU (lockLaunch; ErrLaunchInProgress
//     when another launch holds one), held until Stop,
//  4. cleans stale files for every GPU, refusing live daemons with
//     *daemonfile.LiveDaemonError (all of them, joined) unless opts.Force,
//  5. spawns `wcache serve` for each rank (ServeCommand),
//  6. waits for every ready file whose pid is the child's.
//
// If a daemon fails to start or exits early (*DaemonError with
// ErrStartFailed or ErrExitedEarly), the timeout passes
// (*ReadyTimeoutError) or ctx is cancelled, Launch terminates every other
// daemon (SIGTERM, StopGrace, SIGKILL), waits for them, and only then
// returns the error. Nothing is cleaned or signalled when steps 1–3 fail,
// and nothing is spawned when steps 1–4 fail.
func Launch(ctx context.Context, opts Options) (*Group, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ranks, err := Place(o.Topology)
	if err != nil {
		return nil, err
	}
	targets, err := resolve(ctx, o, ranks)
	if err != nil {
		return nil, err
	}
	if o.Takeover {
		// The previous launcher holds the launch locks and its daemons hold
		// the GPUs until they hand over: spawn first, lock once ready.
		g := newGroup(o, targets)
		if err := g.spawnAll(); err != nil {
			return nil, errors.Join(err, g.Stop())
		}
		if err := g.waitReady(ctx); err != nil {
			return nil, err
		}
		g.lockWhenFree()
		return g, nil
	}
	locks, err := lockLaunch(targets, o.LaunchLock)
	if err != nil {
		return nil, err
	}
	if err := cleanupAll(ctx, o, targets); err != nil {
		locks.release()
		return nil, err
	}
	g := newGroup(o, targets)
	g.setLocks(locks)
	if err := g.spawnAll(); err != nil {
		return nil, errors.Join(err, g.Stop())
	}
	if err := g.waitReady(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

// resolve maps every rank's GPU to its UUID and paths.
func resolve(ctx context.Context, o Options, ranks []Rank) ([]target, error) {
	targets := make([]target, 0, len(ranks))
	byUUID := make(map[string]Rank, len(ranks))
	uuids, err := ResolveDevices(ctx, o.Devices, ranks)
	if err != nil {
		return nil, err
	}
	for _, r := range ranks {
		uuid := uuids[r.GPUID]
		if prev, dup := byUUID[uuid]; dup {
			return nil, fmt.Errorf("GPUs %d and %d are both device %s: %w", prev.GPUID, r.GPUID, uuid, ErrSameDevice)
		}
		byUUID[uuid] = r
		p, err := o.Layout.For(uuid)
		if err != nil {
			return nil, fmt.Errorf("discovery paths of GPU %d (%s): %w", r.GPUID, uuid, err)
		}
		targets = append(targets, target{rank: r, uuid: uuid, paths: p})
	}
	return targets, nil
}

// cleanupAll cleans every GPU's stale files concurrently (a forced takeover
// can take a grace period per GPU) and joins the failures, so that one run
// names every live daemon in the way.
func cleanupAll(ctx context.Context, o Options, targets []target) error {
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			// Results are logged below, one line per GPU that needed work.
			res, err := o.Cleanup(ctx, t.paths, daemonfile.CleanupOptions{Force: o.Force, Grace: o.ForceGrace})
			if err != nil {
				errs[i] = fmt.Errorf("GPU %d (%s): %w", t.rank.GPUID, t.uuid, err)
				return
			}
			switch res.Action {
			case daemonfile.ActionRemovedStale:
				o.Logf("%s: removed stale files of pid %d: %v", t.rank, res.PID, res.Removed)
			case daemonfile.ActionTookOver:
				o.Logf("%s: stopped live daemon pid %d (--force)", t.rank, res.PID)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Daemon describes one daemon of a Group.
type Daemon struct {
	Rank       Rank
	DeviceUUID string
	Paths      paths.Paths
	PID        int
	// Ready is the daemon's ready file as the launcher read it.
	Ready daemonfile.Ready
	// ReadyAfter is the time from spawn to the ready file.
	ReadyAfter time.Duration
}

// child is one spawned daemon.
type child struct {
	target
	out     *childOutput
	proc    Process
	pid     int
	started time.Time

	ready      *daemonfile.Ready
	readyAfter time.Duration
	lastErr    error // the last unexpected ready-file error

	done    chan struct{}
	status  ExitStatus // valid after done
	waitErr error      // valid after done

	killed bool // set by stop only
}

func (c *child) exited() bool { return poll.Closed(c.done) }

func (c *child) failure(kind error) *DaemonError {
	e := &DaemonError{Rank: c.rank, DeviceUUID: c.uuid, PID: c.pid, Kind: kind, Tail: c.out.Tail()}
	if c.exited() {
		e.Status = c.status.String()
		e.Err = c.waitErr
	} else {
		e.Err = c.lastErr
	}
	return e
}

// Group is a set of running daemons, one per local rank.
type Group struct {
	o        Options
	children []*child
	exits    chan *child
	starter  Starter
	own      *ExecStarter // closed by stop when the group created it
	// locks are the launch locks of the group's GPUs, released by stop
	// once its daemons are gone, or once every daemon handed over; with
	// Options.Takeover they are taken after the daemons are ready.
	// handedOver: every daemon handed over to a successor (Supervise).
	handedOver atomic.Bool

	locksMu       sync.Mutex
	locks         launchLocks
	locksReleased bool

	stopOnce sync.Once
	stopErr  error
}

func newGroup(o Options, targets []target) *Group {
	g := &Group{o: o, exits: make(chan *child, len(targets)), starter: o.Starter}
	if g.starter == nil {
		g.own = NewExecStarter()
		g.starter = g.own
	}
	shared := newLockedWriter(o.Output)
	for _, t := range targets {
		g.children = append(g.children, &child{
			target: t,
			out:    newChildOutput("["+t.rank.String()+"] ", shared, o.TailLines),
			done:   make(chan struct{}),
		})
	}
	return g
}

// spawnAll starts every child; on the first failure it returns a
// *DaemonError (ErrStartFailed) and the caller stops those started.
func (g *Group) spawnAll() error {
	for _, c := range g.children {
		spec := ChildSpec{
			Rank:       c.rank,
			DeviceUUID: c.uuid,
			Path:       g.o.Executable,
			Args:       g.serveArgs(c.rank),
			Env:        g.o.Env,
			Output:     c.out,
		}
		proc, err := g.starter.Start(spec)
		if err != nil {
			return &DaemonError{Rank: c.rank, DeviceUUID: c.uuid, Kind: ErrStartFailed, Err: err}
		}
		c.proc, c.pid, c.started = proc, proc.PID(), time.Now()
		g.o.Logf("%s: started daemon pid %d for %s", c.rank, c.pid, c.uuid)
		go g.reap(c)
	}
	return nil
}

// reap waits for c to exit and reports it on g.exits.
func (g *Group) reap(c *child) {
	c.status, c.waitErr = c.proc.Wait()
	c.out.Flush()
	close(c.done)
	g.exits <- c
}

// checkReady reads c's ready file and records it when it names c's pid.
func (g *Group) checkReady(c *child) bool {
	r, err := g.o.ReadReady(c.paths.Ready)
	switch {
	case err == nil && r.PID == c.pid:
		c.ready, c.readyAfter, c.lastErr = &r, time.Since(c.started), nil
		return true
	case err == nil:
		c.lastErr = fmt.Errorf("ready file %s names pid %d, not this daemon", c.paths.Ready, r.PID)
	case errors.Is(err, fs.ErrNotExist):
		c.lastErr = nil
	default:
		c.lastErr = fmt.Errorf("ready file %s: %w", c.paths.Ready, err)
	}
	return false
}

// waitReady waits until every child is ready; on failure it stops the group
// before it returns.
func (g *Group) waitReady(ctx context.Context) error {
	deadline := time.NewTimer(g.o.ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(g.o.PollInterval)
	defer tick.Stop()
	pending := len(g.children)
	poll := func() {
		for _, c := range g.children {
			if c.ready == nil && g.checkReady(c) {
				pending--
				g.o.Logf("%s: daemon pid %d ready in %s (socket %s)", c.rank, c.pid,
					c.readyAfter.Round(time.Millisecond), c.paths.Socket)
			}
		}
	}
	poll()
	for pending > 0 {
		select {
		case c := <-g.exits:
			// Exiting is a failure even after a ready file: the launcher
			// returns only daemons that are serving.
			de := c.failure(ErrExitedEarly)
			if c.ready != nil {
				de.Kind = ErrDaemonDied
			}
			g.o.Logf("%s: %v; stopping the other daemons", c.rank, de.Kind)
			return errors.Join(de, g.Stop())
		case <-tick.C:
			poll()
		case <-deadline.C:
			poll()
			if pending == 0 {
				continue
			}
			te := &ReadyTimeoutError{Timeout: g.o.ReadyTimeout}
			for _, c := range g.children {
				if c.ready == nil {
					te.Pending = append(te.Pending, c.failure(ErrNotReady))
				}
			}
			g.o.Logf("%d daemons not ready after %s; stopping all daemons", len(te.Pending), g.o.ReadyTimeout)
			return errors.Join(te, g.Stop())
		case <-ctx.Done():
			g.o.Logf("launch interrupted; stopping all daemons")
			return errors.Join(fmt.Errorf("launch interrupted before every daemon was ready: %w", ctx.Err()), g.Stop())
		}
	}
	return nil
}

// Daemons describes the daemons of the group, in local rank order.
func (g *Group) Daemons() []Daemon {
	out := make([]Daemon, 0, len(g.children))
	for _, c := range g.children {
		d := Daemon{Rank: c.rank, DeviceUUID: c.uuid, Paths: c.paths, PID: c.pid, ReadyAfter: c.readyAfter}
		if c.ready != nil {
			d.Ready = *c.ready
		}
		out = append(out, d)
	}
	return out
}

// Supervise blocks until ctx is done or a daemon exits. When ctx is done
// (the launcher got SIGTERM or SIGINT), it stops every daemon and returns
// nil if they all stopped cleanly, else a *StopError. When a daemon exits
// on its own, the layout is incomplete and no engine can use it, so
// Supervise stops the others. A daemon that exited with status 0 was
// stopped on request (`wcache stop`, on one GPU or --all): that is a clean
// stop of the layout, and Supervise returns what stopping the others
// returns (nil when they stop cleanly). Any other exit — crash, plugin
// death — returns a *DaemonError (ErrDaemonDied) naming the one that
// exited. Call it once, after Launch.
//
// A daemon that exited with status 0 while a successor's ready file appeared
// on its GPU within Options.HandoverWait handed its memory over (`wcache
// serve --takeover`, a rolling upgrade): Supervise keeps the other daemons
// serving, since their successors are taking them over too. Once every
// daemon has handed over it releases the launch locks (the successors'
// launcher takes them) and waits for ctx, then returns nil: a launcher that
// exited instead would be restarted by its supervisor (systemd, the
// kubelet) and take the weights back.
func (g *Group) Supervise(ctx context.Context) error {
	handed := 0
	for {
		select {
		case c := <-g.exits:
			if c.status.Success() {
				if pid, ok := g.successor(ctx, c); ok {
					handed++
					g.o.Logf("%s: handed over to daemon pid %d (serve --takeover)", c.rank, pid)
					if handed < len(g.children) {
						continue
					}
					g.releaseLocks()
					g.handedOver.Store(true)
					g.o.Logf("every daemon handed over to a successor; waiting for SIGTERM")
					<-ctx.Done()
					return nil
				}
				g.o.Logf("%s: stopped on request (%s); stopping the other daemons", c.rank, c.status)
				return g.Stop()
			}
			de := c.failure(ErrDaemonDied)
			g.o.Logf("%s: %v (%s); stopping the other daemons", c.rank, ErrDaemonDied, de.Status)
			return errors.Join(de, g.Stop())
		case <-ctx.Done():
			g.o.Logf("stopping %d daemons", len(g.children)-handed)
			return g.Stop()
		}
	}
}

// Stop sends SIGTERM to every running daemon, waits up to StopGrace for
// them, sends SIGKILL to those left and waits for them too. It returns nil
// when every daemon it signalled exited with status 0 or by SIGTERM, and a
// *StopError otherwise. Daemons that had already exited are not its
// business (Launch or Supervise reports them). Stop is idempotent; later
// calls return the first result.
func (g *Group) Stop() error {
	g.stopOnce.Do(func() { g.stopErr = g.stop() })
	return g.stopErr
}

func (g *Group) stop() error {
	defer g.releaseLocks() // deferred first: runs after the children are gone
	if g.own != nil {
		// Children still alive when the spawning thread exits get
		// Pdeathsig; close only after they are gone.
		defer g.own.Close()
	}
	var live []*child
	for _, c := range g.children {
		// Never started (a spawn failed before it), or already exited.
		if c.proc == nil || c.exited() {
			continue
		}
		live = append(live, c)
		_ = c.proc.Signal(syscall.SIGTERM)
	}
	if len(live) == 0 {
		return nil
	}
	grace := time.NewTimer(g.o.StopGrace)
	defer grace.Stop()
	waitAll(live, grace.C)
	for _, c := range live {
		if !c.exited() {
			c.killed = true
			g.o.Logf("%s: daemon pid %d still running after %s; killing it", c.rank, c.pid, g.o.StopGrace)
			_ = c.proc.Signal(syscall.SIGKILL)
		}
	}
	kill := time.NewTimer(killWait)
	defer kill.Stop()
	waitAll(live, kill.C)

	var problems []string
	for _, c := range live {
		who := fmt.Sprintf("%s (pid %d)", c.rank, c.pid)
		switch {
		case !c.exited():
			problems = append(problems, who+": still running after SIGKILL")
		case c.killed:
			problems = append(problems, fmt.Sprintf("%s: killed after %s grace", who, g.o.StopGrace))
		case !c.status.Success() && c.status.Signal != syscall.SIGTERM:
			problems = append(problems, who+": "+c.status.String())
		}
	}
	if len(problems) > 0 {
		return &StopError{Problems: problems}
	}
	return nil
}

// waitAll waits until every child has exited or until stop fires.
func waitAll(children []*child, stop <-chan time.Time) {
	for _, c := range children {
		select {
		case <-c.done:
		case <-stop:
			return
		}
	}
}
