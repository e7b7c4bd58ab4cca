package bench

import (
	"context"
	"fmt"
	"time"
)

// TakeoverCase is one checkpoint's chain of `serve --takeover` upgrades:
// each successor receives the memory of the daemon before it over the
// descriptor channel (the mock's memfd handles) and serves the same
// generation without loading.
type TakeoverCase struct {
	Model Model `json:"model"`
	Runs  int   `json:"runs"`
	// StartToReady is the successor's fork/exec until its ready file named
	// it (the old daemon's exit included: the successor waits for its lock).
	StartToReady Summary `json:"start_to_ready"`
	// DaemonTotal is the successor's own start-up (Status total).
	DaemonTotal Summary `json:"daemon_total"`
	// BytesAdopted is what each successor took over (the checkpoint's
	// bytes), BytesLoaded what it read (0).
	BytesAdopted uint64 `json:"bytes_adopted"`
	BytesLoaded  uint64 `json:"bytes_loaded"`
}

// TakeoverResult is the takeover scenario's figures.
type TakeoverResult struct {
	Cases []TakeoverCase `json:"cases"`
}

// takeoverGoalMS: a takeover of the large checkpoint, median (issue 14).
const takeoverGoalMS = 1000

// runTakeover loads the small and the large checkpoint once each, then
// upgrades the daemon o.Repeats times in a row with serve --takeover.
func runTakeover(ctx context.Context, e *Env) (any, []Target, error) {
	res := &TakeoverResult{}
	var targets []Target
	for _, spec := range []ModelSpec{e.smallFew(), e.largeFew()} {
		m, err := e.Model(spec)
		if err != nil {
			return nil, nil, err
		}
		c, err := takeoverChain(ctx, e, m)
		if err != nil {
			return nil, nil, fmt.Errorf("takeover, %d MiB: %w", m.Bytes>>20, err)
		}
		res.Cases = append(res.Cases, c)
		if spec == e.largeFew() {
			targets = append(targets, atMost(fmt.Sprintf("serve --takeover start to ready, median, %d MiB", m.Bytes>>20),
				c.StartToReady.MedianMS, takeoverGoalMS, "ms"))
		}
	}
	return res, targets, nil
}

// takeoverChain serves m, then replaces the daemon e.Repeats times; every
// successor must report a takeover with nothing loaded.
func takeoverChain(ctx context.Context, e *Env, m *Model) (TakeoverCase, error) {
	c := TakeoverCase{Model: *m, Runs: e.Repeats}
	w, d, _, err := serving(ctx, e.Options, "takeover", m)
	if err != nil {
		return c, err
	}
	defer w.Close()
	var ready, total []time.Duration
	for i := range e.Repeats {
		next, err := w.startServe(ctx, nil, "--takeover")
		if err != nil {
			return c, err
		}
		select {
		case <-d.Done():
		case <-time.After(stopTimeout):
			next.Kill()
			return c, fmt.Errorf("the daemon taken over (pid %d) did not exit", d.PID())
		}
		d = next
		st, err := w.status(ctx)
		if err != nil {
			return c, d.withOutput(err)
		}
		p := st.StartPhases
		if p.Source != "takeover" || p.BytesLoaded != 0 || p.BytesAdopted != m.Bytes {
			return c, d.withOutput(fmt.Errorf("successor %d reports source %q, %d bytes loaded, %d adopted; want a takeover of %d bytes",
				i+1, p.Source, p.BytesLoaded, p.BytesAdopted, m.Bytes))
		}
		c.BytesAdopted, c.BytesLoaded = p.BytesAdopted, p.BytesLoaded
		ready, total = append(ready, d.StartToReady), append(total, p.Total)
		e.logf("takeover %d/%d (%d MiB): ready in %s", i+1, e.Repeats, m.Bytes>>20, ready[i].Round(time.Millisecond))
	}
	c.StartToReady, c.DaemonTotal = Summarize(ready), Summarize(total)
	return c, nil
}
