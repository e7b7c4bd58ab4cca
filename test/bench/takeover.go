package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/wcache/wcache/test/benchreport"
)

// TakeoverCase is one checkpoint's chain of `serve --takeover` upgrades:
// each successor receives the memory of the daemon before it over the
// descriptor channel (the mock's memfd handles) and serves the same
// generation without loading.
// Times start_to_ready, a successor's fork/exec until its ready file named
// it (the old daemon's exit included: it waits for the lock), and
// daemon_total, its own start-up (Status); BytesAdopted what it took over,
// BytesLoaded what it read (0).
type TakeoverCase struct {
	Model        Model  `json:"model"`
	BytesAdopted uint64 `json:"bytes_adopted"`
	BytesLoaded  uint64 `json:"bytes_loaded"`
	benchreport.Figures
}

// TakeoverResult is the takeover scenario's figures.
type TakeoverResult struct {
	Cases []TakeoverCase `json:"cases"`
}

// takeoverGoalMS: a takeover of the large checkpoint, median (issue 14).
const takeoverGoalMS = 1000

// runTakeover loads the small and the large checkpoint once each, then
// upgrades the daemon Repeats times in a row with serve --takeover; every
// successor must report a takeover with nothing loaded.
func runTakeover(ctx context.Context, e *Env) (any, []Target, error) {
	res := &TakeoverResult{}
	chain := func(m *Model) (TakeoverCase, error) {
		c, l := TakeoverCase{Model: *m}, laps{}
		s, err := serving(ctx, e.Options, "takeover", m, m)
		if err != nil {
			return c, err
		}
		defer s.Close()
		w, d := s.world, s.d
		err = e.rounds(fmt.Sprintf("takeover, %d MiB", m.Bytes>>20), e.Repeats, func(i int) (string, error) {
			next, err := w.startServe(ctx, 0, nil, "--takeover")
			if err != nil {
				return "", err
			}
			if _, exited := d.Wait(stopTimeout); !exited {
				next.Kill()
				return "", fmt.Errorf("the daemon taken over (pid %d) did not exit", d.PID())
			}
			d = next
			st, err := w.status(ctx)
			if err != nil {
				return "", d.withOutput(err)
			}
			if p := st.StartPhases; p.Source != "takeover" || p.BytesLoaded != 0 || p.BytesAdopted != m.Bytes {
				return "", d.withOutput(fmt.Errorf("successor reports source %q, %d bytes loaded, %d adopted; want a takeover of %d bytes",
					p.Source, p.BytesLoaded, p.BytesAdopted, m.Bytes))
			}
			c.BytesAdopted, c.BytesLoaded = st.StartPhases.BytesAdopted, st.StartPhases.BytesLoaded
			l["start_to_ready"], l["daemon_total"] = append(l["start_to_ready"], d.StartToReady), append(l["daemon_total"], st.StartPhases.Total)
			return fmt.Sprintf("ready in %s", d.StartToReady.Round(time.Millisecond)), nil
		})
		c.Figures = benchreport.FiguresOf(l, nil)
		return c, err
	}
	for _, spec := range []ModelSpec{e.smallFew(), e.largeFew()} {
		m, err := e.Model(spec)
		var c TakeoverCase
		if err == nil {
			c, err = chain(m)
		}
		if err != nil {
			return nil, nil, err
		}
		res.Cases = append(res.Cases, c)
	}
	large := res.Cases[1]
	return res, []Target{benchreport.AtMost(fmt.Sprintf("serve --takeover start to ready, median, %d MiB", large.Model.Bytes>>20),
		large.Times["start_to_ready"].MedianMS, takeoverGoalMS, "ms")}, nil
}
