package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/test/benchreport"
	"github.com/wcache/wcache/test/testproc"
)

// ConcurrencyResult is the concurrency scenario's figures (the docs
// template, "Concurrency"); FirstErrors and DaemonWarnings (the daemon's
// WARN/ERROR lines) are the first few when there were errors.
type ConcurrencyResult struct {
	Model            Model           `json:"model"`
	Seconds          float64         `json:"seconds"`
	Attaches         int             `json:"attaches"`
	PerSec           float64         `json:"attaches_per_s"`
	Errors           int             `json:"errors"`
	FirstErrors      []string        `json:"first_errors,omitempty"`
	DaemonWarnings   []string        `json:"daemon_warnings,omitempty"`
	LeasesAfter      int             `json:"leases_after"`
	GoroutinesBefore int             `json:"goroutines_before"`
	GoroutinesAfter  int             `json:"goroutines_after"`
	OpenFDsBefore    int             `json:"open_fds_before"`
	OpenFDsAfter     int             `json:"open_fds_after"`
	Footprint        LoadedFootprint `json:"footprint_after"`
	benchreport.Figures
}

// settleTimeout bounds waiting for the daemon to see every lease end.
const (
	settleTimeout = 10 * time.Second
	maxErrorsKept = 5
)

// runConcurrency serves the small checkpoint to Clients clients, each on
// its own connection, attaching and releasing in a loop for
// ConcurrencyDuration.
func runConcurrency(ctx context.Context, e *Env) (any, []Target, error) {
	s, err := e.serve(ctx, "concurrency", e.smallFew())
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	w, d, m, cfg := s.world, s.d, s.m, s.cfg
	before, err := w.status(ctx)
	if err != nil {
		return nil, nil, d.withOutput(err)
	}
	var mu sync.Mutex
	all, res := laps{}, &ConcurrencyResult{Model: *m, GoroutinesBefore: before.Goroutines, OpenFDsBefore: before.OpenFDs}
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if res.Errors++; len(res.FirstErrors) < maxErrorsKept {
			res.FirstErrors = append(res.FirstErrors, err.Error())
		}
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range e.Clients {
		wg.Go(func() {
			c, err := client.Dial(ctx, w.Target, client.Options{ClientName: fmt.Sprintf("wcache-bench client %d", i)})
			if err != nil {
				fail(err)
				return
			}
			defer c.Close()
			mine := laps{}
			for time.Since(start) < e.ConcurrencyDuration {
				t0 := time.Now()
				a, err := c.Attach(ctx, cfg)
				took := time.Since(t0)
				if err == nil && len(a.Manifest.Tensors) != m.Tensors {
					fail(fmt.Errorf("manifest of %d tensors, want %d", len(a.Manifest.Tensors), m.Tensors))
				}
				if err == nil {
					err = a.Lease.Close()
				}
				if err != nil {
					fail(err)
					continue
				}
				mine["attach"], mine["cycle"] = append(mine["attach"], took), append(mine["cycle"], time.Since(t0))
			}
			mu.Lock()
			all["attach"], all["cycle"] = append(all["attach"], mine["attach"]...), append(all["cycle"], mine["cycle"]...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.Seconds, res.Attaches = benchreport.Round3(elapsed.Seconds()), len(all["attach"])
	res.PerSec, res.Figures = benchreport.Round3(float64(res.Attaches)/elapsed.Seconds()), benchreport.FiguresOf(all, nil)
	// The daemon sees a release when the stream ends on its side: wait
	// for the lease count to drop to 0 (it must, or leases leak).
	after, err := w.waitLeases(ctx, 0)
	if err != nil {
		return nil, nil, d.withOutput(err)
	}
	res.LeasesAfter, res.GoroutinesAfter, res.OpenFDsAfter = len(after.Leases), after.Goroutines, after.OpenFDs
	for _, line := range strings.Split(d.Output(), "\n") {
		if res.Errors > 0 && len(res.DaemonWarnings) < maxErrorsKept && (strings.Contains(line, "[WARN]") || strings.Contains(line, "[ERROR]")) {
			res.DaemonWarnings = append(res.DaemonWarnings, line)
		}
	}
	if res.Footprint, err = loadedFootprint(d, fmt.Sprintf("after %d clients × %.0f s of attach/release", e.Clients, elapsed.Seconds())); err != nil {
		return nil, nil, err
	}
	e.logf("concurrency: %d attaches in %.1f s (%.0f/s), p99 %.2f ms, %d errors", res.Attaches, elapsed.Seconds(),
		res.PerSec, res.Times["attach"].P99MS, res.Errors)
	return res, []Target{
		benchreport.AtMost(fmt.Sprintf("errors, %d clients", e.Clients), float64(res.Errors), 0, ""),
		benchreport.AtMost("leases left after release", float64(res.LeasesAfter), 0, ""),
		benchreport.AtMost("daemon+plugin RssAnon+RssFile "+res.Footprint.After, float64(res.Footprint.NonShared)/(1<<20), footprintGoalMiB, "MiB"),
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
	Daemon    testproc.Memory `json:"daemon"`
	Plugin    testproc.Memory `json:"plugin"`
	NonShared uint64          `json:"non_shared_bytes"`
	After     string          `json:"after"`
}

// loadedFootprint reads the memory of the daemon and its plugin now.
func loadedFootprint(d *daemonProc, after string) (f LoadedFootprint, err error) {
	f.After = after
	pp, err := testproc.PluginPID(d.PID())
	if err == nil {
		if f.Daemon, err = testproc.ReadMemory(d.PID()); err == nil {
			f.Plugin, err = testproc.ReadMemory(pp)
		}
	}
	f.NonShared = f.Daemon.NonShared() + f.Plugin.NonShared()
	return f, err
}
