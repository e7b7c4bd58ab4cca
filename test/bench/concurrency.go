package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/sdk/poll"
)

// ConcurrencyResult is the concurrency scenario's figures.
type ConcurrencyResult struct {
	Model    Model   `json:"model"`
	Clients  int     `json:"clients"`
	Seconds  float64 `json:"seconds"`
	Attaches int     `json:"attaches"`
	PerSec   float64 `json:"attaches_per_s"`
	// Attach is Attach until the manifest arrived; Cycle is attach plus
	// release, per client iteration.
	Attach Summary `json:"attach"`
	Cycle  Summary `json:"cycle"`
	Errors int     `json:"errors"`
	// FirstErrors are the first few error messages, if any.
	FirstErrors []string `json:"first_errors,omitempty"`
	// DaemonWarnings are the daemon's first few WARN/ERROR log lines when
	// there were errors, so that a rare failure can be traced after the run.
	DaemonWarnings []string `json:"daemon_warnings,omitempty"`
	// LeasesAfter is the daemon's lease count once every client released
	// (must be 0); Goroutines and OpenFDs are the daemon's before and after.
	LeasesAfter      int `json:"leases_after"`
	GoroutinesBefore int `json:"goroutines_before"`
	GoroutinesAfter  int `json:"goroutines_after"`
	OpenFDsBefore    int `json:"open_fds_before"`
	OpenFDsAfter     int `json:"open_fds_after"`
	// Footprint is the daemon's and plugin's memory after the run.
	Footprint LoadedFootprint `json:"footprint_after"`
}

const (
	// settleTimeout bounds waiting for the daemon to see every lease end.
	settleTimeout = 10 * time.Second
	maxErrorsKept = 5
)

// runConcurrency serves the small checkpoint to o.Clients clients, each on
// its own connection, attaching and releasing in a loop for
// o.ConcurrencyDuration.
func runConcurrency(ctx context.Context, e *Env) (any, []Target, error) {
	o := e.Options
	m, err := e.Model(e.smallFew())
	if err != nil {
		return nil, nil, err
	}
	w, d, cfg, err := serving(ctx, o, "concurrency", m)
	if err != nil {
		return nil, nil, err
	}
	defer w.Close()
	before, err := w.status(ctx)
	if err != nil {
		return nil, nil, d.withOutput(err)
	}

	var (
		mu          sync.Mutex
		attach, cyc []time.Duration
		errs        []string
		nErrs       int
		wg          sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if nErrs++; len(errs) < maxErrorsKept {
			errs = append(errs, err.Error())
		}
	}
	start := time.Now()
	deadline := start.Add(o.ConcurrencyDuration)
	for i := range o.Clients {
		wg.Go(func() {
			c, err := client.Dial(ctx, w.Target, client.Options{ClientName: fmt.Sprintf("wcache-bench client %d", i)})
			if err != nil {
				fail(err)
				return
			}
			defer c.Close()
			var at, cy []time.Duration
			for time.Now().Before(deadline) {
				t0 := time.Now()
				a, err := c.Attach(ctx, cfg)
				if err != nil {
					fail(err)
					continue
				}
				t1 := time.Now()
				if len(a.Manifest.Tensors) != m.Tensors {
					fail(fmt.Errorf("manifest of %d tensors, want %d", len(a.Manifest.Tensors), m.Tensors))
				}
				if err := a.Lease.Close(); err != nil {
					fail(err)
					continue
				}
				at, cy = append(at, t1.Sub(t0)), append(cy, time.Since(t0))
			}
			mu.Lock()
			attach, cyc = append(attach, at...), append(cyc, cy...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	res := &ConcurrencyResult{Model: *m, Clients: o.Clients, Seconds: round3(elapsed.Seconds()), Attaches: len(attach),
		PerSec: round3(float64(len(attach)) / elapsed.Seconds()), Errors: nErrs, FirstErrors: errs,
		GoroutinesBefore: before.Goroutines, OpenFDsBefore: before.OpenFDs, Attach: Summarize(attach), Cycle: Summarize(cyc)}
	// The daemon sees a release when the stream ends on its side: wait
	// for the lease count to drop to 0 (it must, or leases leak).
	after, err := w.waitLeases(ctx, 0)
	if err != nil {
		return nil, nil, d.withOutput(err)
	}
	res.LeasesAfter, res.GoroutinesAfter, res.OpenFDsAfter = len(after.Leases), after.Goroutines, after.OpenFDs
	if nErrs > 0 {
		for _, line := range strings.Split(d.Output(), "\n") {
			if len(res.DaemonWarnings) < maxErrorsKept && (strings.Contains(line, "[WARN]") || strings.Contains(line, "[ERROR]")) {
				res.DaemonWarnings = append(res.DaemonWarnings, line)
			}
		}
	}
	if res.Footprint, err = loadedFootprint(d, fmt.Sprintf("after %d clients × %.0f s of attach/release", o.Clients, elapsed.Seconds())); err != nil {
		return nil, nil, err
	}
	o.logf("concurrency: %d attaches in %.1f s (%.0f/s), p99 %.2f ms, %d errors", res.Attaches, elapsed.Seconds(),
		res.PerSec, res.Attach.P99MS, res.Errors)
	return res, []Target{
		atMost(fmt.Sprintf("errors, %d clients", o.Clients), float64(res.Errors), 0, ""),
		atMost("leases left after release", float64(res.LeasesAfter), 0, ""),
		atMost("daemon+plugin RssAnon+RssFile "+res.Footprint.After, float64(res.Footprint.NonShared)/(1<<20), footprintGoalMiB, "MiB"),
	}, d.Stop()
}

// waitLeases polls Status until the daemon holds n leases.
func (w *world) waitLeases(ctx context.Context, n int) (st *client.Status, err error) {
	_, perr := poll.Until(ctx, settleTimeout, func() bool {
		st, err = w.status(ctx)
		return err != nil || len(st.Leases) == n
	})
	if err != nil {
		return nil, err
	}
	return st, perr
}

// LoadedFootprint is the memory of a daemon and its plugin at one moment.
type LoadedFootprint struct {
	Daemon    ProcMemory `json:"daemon"`
	Plugin    ProcMemory `json:"plugin"`
	NonShared uint64     `json:"non_shared_bytes"`
	After     string     `json:"after"`
}

// loadedFootprint reads the memory of the daemon and its plugin now.
func loadedFootprint(d *daemonProc, after string) (LoadedFootprint, error) {
	f := LoadedFootprint{After: after}
	pp, err := d.PluginPID()
	if err == nil {
		if f.Daemon, err = ReadProcMemory(d.PID()); err == nil {
			f.Plugin, err = ReadProcMemory(pp)
		}
	}
	f.NonShared = f.Daemon.NonShared() + f.Plugin.NonShared()
	return f, err
}
