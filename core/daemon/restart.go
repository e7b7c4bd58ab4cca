package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/wcache/wcache/sdk"
)

// DefaultRestartTimeout bounds starting a replacement plugin and importing
// every allocation into it.
const DefaultRestartTimeout = 60 * time.Second

// Plugin crash-loop bounds (Options.RestartBackoff).
const (
	DefaultRestartBackoff = 200 * time.Millisecond
	MaxRestartBackoff     = 30 * time.Second
	PluginRestartWindow   = 10 * time.Minute
	MaxPluginRestarts     = 5
)

// restartStats count the plugin restarts a daemon survived; recent are
// the times of those within PluginRestartWindow.
type restartStats struct {
	count  int
	last   time.Duration
	recent []time.Time
}

// restartBackoff is the wait before a restart that follows n others within
// the window: 0 for the first, then base, 2·base, … up to MaxRestartBackoff.
func restartBackoff(n int, base time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	d := base
	for i := 1; i < n && d < MaxRestartBackoff; i++ {
		d *= 2
	}
	return min(d, MaxRestartBackoff)
}

// canRecover reports why the plugin's exit is fatal ("" when it is not):
// only descriptor handles (the daemon holds the memory itself) survive it,
// only while every generation serves (none is published or drained) and
// the daemon is not stopping, and only when the daemon knows how to start
// a new plugin.
func (d *Daemon) canRecover() string {
	if d.opts.RestartPlugin == nil {
		return "no way to start a new plugin (Options.RestartPlugin)"
	}
	return d.reg.WhyNotServing(func(g *generation) string {
		for i, h := range g.Manifest.handles {
			if g.Manifest.files.ownFile(i) == nil {
				return fmt.Sprintf("generation %d: handle %d is %q, a name whose memory lived in the plugin process", g.ID, i, h.Kind)
			}
		}
		return ""
	})
}

// recoverPlugin replaces a dead plugin: it starts a new one and imports the
// descriptor of every allocation of every generation into it, so that the
// daemon serves the same generations without reading the disk. Leases are untouched (their
// mappings never depended on the plugin). An error leaves the daemon to
// shut down as for any fatal plugin exit.
func (d *Daemon) recoverPlugin(ctx context.Context) error {
	begin := time.Now()
	old := d.plugin
	d.log.Warn("backend plugin exited: starting a new one and importing the allocations", "error", old.ExitError())
	_ = old.Close()
	ctx, cancel := context.WithTimeout(ctx, DefaultRestartTimeout)
	defer cancel()
	p, err := d.opts.RestartPlugin(ctx)
	if err != nil {
		return fmt.Errorf("start a new backend plugin: %w", err)
	}
	b := p.Backend()
	n, err := d.importAll(ctx, b)
	if err != nil {
		_ = p.Close()
		return err
	}
	// d.mu after the registry's lock is released: rewriteReady takes them
	// in the other order.
	d.mu.Lock()
	d.plugin, d.backend = p, b
	d.restarts.count++
	d.restarts.last = time.Since(begin)
	last, count := d.restarts.last, d.restarts.count
	d.mu.Unlock()
	d.log.Info("backend plugin replaced: serving the same generations", "generations", n,
		"seconds", last.Seconds(), "restarts", count)
	return nil
}

// importAll imports every allocation of every generation into b and makes
// the new ids the generations' own; it returns the number of generations.
// The generations cannot change meanwhile: the registry is locked, and
// nothing else uses the backend that died.
func (d *Daemon) importAll(ctx context.Context, b sdk.Backend) (int, error) {
	return d.reg.ReplaceAllocs(func(g *generation) ([]sdk.AllocationID, error) {
		m := g.Manifest
		var ids []sdk.AllocationID
		for i, h := range m.handles {
			id, err := b.Import(ctx, d.opts.GPU, sdk.Handle{Kind: h.GetKind(), Data: h.GetData(), Size: h.GetSize(), File: m.files.ownFile(i)})
			if err != nil {
				return nil, fmt.Errorf("generation %d: import allocation %d into the new plugin: %w", g.ID, i+1, err)
			}
			ids = append(ids, id)
		}
		return ids, nil
	})
}

// errRecoveryFailed wraps why a dead plugin could not be replaced.
var errRecoveryFailed = errors.New("plugin recovery failed")

// replacePlugin handles the plugin's exit while serving: true when a new
// plugin took over, false when the exit is fatal (logged with the reason).
func (d *Daemon) replacePlugin(ctx context.Context) bool {
	if why := d.canRecover(); why != "" {
		d.log.Error("backend plugin exited and cannot be replaced", "reason", why)
		return false
	}
	now := time.Now()
	d.restarts.recent = slices.DeleteFunc(d.restarts.recent, func(t time.Time) bool { return now.Sub(t) > PluginRestartWindow })
	n := len(d.restarts.recent)
	if n >= MaxPluginRestarts {
		d.log.Error("backend plugin exited and is not replaced: a crash loop", "restarts_in_window", n,
			"window", PluginRestartWindow, "error", d.plugin.ExitError())
		return false
	}
	if wait := restartBackoff(n, d.opts.RestartBackoff); wait > 0 {
		d.log.Warn("backend plugin exited again: restarting after a back-off", "restarts_in_window", n, "retry_in", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return false
		}
	}
	d.restarts.recent = append(d.restarts.recent, time.Now())
	if err := d.recoverPlugin(ctx); err != nil {
		d.log.Error("backend plugin exited and could not be replaced", "error", fmt.Errorf("%w: %w", errRecoveryFailed, err))
		return false
	}
	return true
}
