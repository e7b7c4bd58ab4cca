package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/wcache/wcache/test/benchreport"
)

// BaselineResult compares this build with a baseline revision's
// (-baseline DIR, built by `make bench BASELINE=rev`) in the same rounds,
// the builds' order rotating each round, the first round untimed. Each
// build is driven through its own binaries only (wcache and its mock
// plugin: their flags and wire are those of their revision), each round
// starting a daemon per checkpoint (serveAndAttach): serve's start to
// ready, then the attach step `wcache attach --json` reports
// (timings_ms.attach: connected to manifest decoded) and its whole
// process, on the few-tensor and the IdentityTensors-tensor checkpoints;
// the large checkpoint's bytes ÷ its start to ready. Each build keeps one
// digest cache (XDG_CACHE_HOME) over the rounds, as a user's serve does
// between restarts; the large checkpoint is served once more with an empty
// one, a first load that hashes every file.
type BaselineResult struct {
	NotMeasured string                   `json:"not_measured,omitempty"`
	Rev         string                   `json:"rev,omitempty"`
	Rounds      int                      `json:"rounds,omitempty"`
	Figures     []benchreport.Comparison `json:"figures,omitempty"`
}

// cliAttachRuns is how many `wcache attach --json` serveAndAttach runs per
// daemon: one untimed, then timed ones, whose short times (~10 ms a
// process) need more samples than a round gives to hold a median.
const cliAttachRuns = 4

// cliAttachGoalMS is issue 37's goal for the CLI's attach step at the
// IdentityTensors (100,000) checkpoint.
const cliAttachGoalMS = 20

func runBaseline(ctx context.Context, e *Env) (any, []Target, error) {
	if e.BaselineDir == "" {
		return &BaselineResult{NotMeasured: "no baseline build (-baseline DIR; make bench BASELINE=rev)"}, nil, nil
	}
	var models []*Model // few, many (attach), large (serve's rate only)
	for _, s := range []ModelSpec{e.smallFew(), {Bytes: e.SmallBytes, Tensors: e.IdentityTensors}, e.largeFew()} {
		m, err := e.warmModel(s)
		if err != nil {
			return nil, nil, err
		}
		models = append(models, m)
	}
	defer e.dropModel(models[1].Spec)
	res := &BaselineResult{Rev: e.BaselineRev, Rounds: 2 * e.Repeats}
	builds, samples, order := []string{"new", "baseline"}, map[[2]string][]float64{}, []string{}
	caches := map[string]string{}
	for _, b := range builds {
		dir, err := os.MkdirTemp(e.TmpDir, "wcache-bench-digests-"+b+"-")
		if err != nil {
			return nil, nil, err
		}
		defer os.RemoveAll(dir)
		caches[b] = dir
	}
	err := e.rounds("baseline", res.Rounds+1, func(i int) (string, error) {
		add := func(b, figure string, v float64) {
			if k := [2]string{b, figure}; i > 0 {
				if len(samples[k]) == 0 && b == "new" {
					order = append(order, figure)
				}
				samples[k] = append(samples[k], benchreport.Round3(v))
			}
		}
		for k := range builds {
			b, o := builds[(i+k)%len(builds)], e.Options
			if b == "baseline" {
				o.BinDir = e.BaselineDir
			}
			for j, m := range models {
				if err := serveAndAttach(ctx, o, m, caches[b], j < 2, func(f string, v float64) { add(b, f, v) }); err != nil {
					return "", fmt.Errorf("%s build: %w", b, err)
				}
			}
			first := func(f string, v float64) {
				add(b, strings.TrimSuffix(f, ", GiB/s")+", a first load (empty digest cache), GiB/s", v)
			}
			if err := serveAndAttach(ctx, o, models[2], "", false, first); err != nil {
				return "", fmt.Errorf("%s build: %w", b, err)
			}
		}
		return fmt.Sprintf("%d figures of both builds", len(order)), nil
	})
	if err != nil {
		return nil, nil, err
	}
	var targets []Target
	for _, f := range order {
		rate := strings.HasSuffix(f, "GiB/s")
		c := benchreport.Compare(strings.TrimSuffix(f, ", GiB/s"), map[bool]string{false: "ms", true: "GiB/s"}[rate], rate,
			samples[[2]string{"new", f}], samples[[2]string{"baseline", f}])
		e.logf("baseline: %s: %g %s ÷ %g = %.3f (band ±%.3f)", c.Metric, c.New, c.Unit, c.Base, c.Ratio, c.Band)
		res.Figures, targets = append(res.Figures, c), append(targets, c.Target())
		if f == fmt.Sprintf("wcache attach --json, %d tensors: attach step", models[1].Tensors) {
			targets = append(targets, benchreport.AtMost(f+", median", c.New, cliAttachGoalMS, "ms"))
		}
	}
	return res, targets, nil
}

// serveAndAttach starts `wcache serve` of o's build on m in a world of its
// own (digest cache: the folder cache, "" the world's own, empty) and adds its start to ready (ms; with attach false, m's bytes ÷ it,
// GiB/s); with attach, it then runs `wcache attach --json` of that build
// cliAttachRuns times, the first untimed, and adds the attach step each
// later one reports and its whole process (ms). It stops the daemon and
// removes the world.
func serveAndAttach(ctx context.Context, o Options, m *Model, cache string, attach bool, add func(figure string, v float64)) error {
	w, err := newWorld(o, "baseline", m)
	if err != nil {
		return err
	}
	defer w.Close()
	if cache != "" {
		w.Setenv("XDG_CACHE_HOME=" + cache)
	}
	d, err := w.startServe(ctx, 0, nil, "--model", m.Dir)
	if err != nil {
		return err
	} else if !attach {
		add(fmt.Sprintf("serve: checkpoint bytes ÷ start to ready, %d MiB, GiB/s", m.Bytes>>20), benchreport.GiBps(m.Bytes, d.StartToReady))
		return d.Stop()
	}
	add(fmt.Sprintf("serve start to ready, %d tensors, %d MiB", m.Tensors, m.Bytes>>20), benchreport.MS(d.StartToReady))
	var out struct {
		Tensors   int                `json:"tensors"`
		TimingsMS map[string]float64 `json:"timings_ms"`
	}
	for i := range cliAttachRuns {
		r, err := w.run(filepath.Join(o.BinDir, "wcache"), "attach", "--json", "--backend", "mock", "--device-uuid", w.UUID, "--model", m.Dir)
		if err == nil {
			err = json.Unmarshal([]byte(r.Stdout), &out)
		}
		if err == nil && out.Tensors != m.Tensors {
			err = fmt.Errorf("attach reports %d tensors, the checkpoint has %d", out.Tensors, m.Tensors)
		}
		if err != nil {
			return d.withOutput(err)
		}
		if i > 0 {
			add(fmt.Sprintf("wcache attach --json, %d tensors: attach step", m.Tensors), out.TimingsMS["attach"])
			add(fmt.Sprintf("wcache attach --json, %d tensors: whole process", m.Tensors), benchreport.MS(r.Wall))
		}
	}
	return d.Stop()
}
