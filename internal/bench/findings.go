package bench

import (
	"context"
	"fmt"
	"strings"
)

// pythonProfileRounds is how many attaches the Python profile covers.
const pythonProfileRounds = 20

// Check kinds, for explain.
const (
	keyRestartGo     = "restart-go"
	keyRestartPython = "restart-python"
	keyAttachP50     = "attach-p50"
	keyAttachFlat    = "attach-flat"
	keyFillWarm      = "fill-warm"
	keyFillCold      = "fill-cold"
	keyConcErrors    = "concurrency-errors"
	keyConcLeases    = "concurrency-leases"
	keyFootSteady    = "footprint-steady"
	keyFootGrowth    = "footprint-growth"
	keyStartup       = "startup"
)

// explain turns every missed check into a Finding: the reason, from the
// figures of the same run, and — with o.Profile — the top of a CPU profile
// of the slow path (one profile per kind of miss).
func explain(ctx context.Context, o Options, r *Report, models *modelSet) []Finding {
	var out []Finding
	profiled := map[string]bool{}
	for i := range r.Checks {
		c := &r.Checks[i]
		if c.Met {
			continue
		}
		c.Why = why(c, r)
		f := Finding{Check: fmt.Sprintf("%s: %s (target %s %s, measured %s %s)", c.Row, c.Metric, c.Target, c.Unit,
			num(c.Value), c.Unit), Why: c.Why}
		group := profileGroup(c.key)
		switch {
		case !o.Profile:
		case profiled[group]:
			f.Why += " The CPU profile of this path is shown with the finding above."
		default:
			profiled[group] = true
			what, top, err := profileMiss(ctx, o, c.key, r, models)
			switch {
			case err != nil:
				f.ProfileWhat, f.Profile = what, "profile failed: "+err.Error()
			case top != "":
				f.ProfileWhat, f.Profile = what, top
				f.Why += profileReading(group, top)
			}
		}
		c.Why = f.Why
		out = append(out, f)
	}
	return out
}

// profileGroup maps check kinds that share a slow path to one profile.
func profileGroup(key string) string {
	switch key {
	case keyFillWarm, keyFillCold:
		return "fill"
	case keyAttachP50, keyAttachFlat:
		return "attach"
	}
	return key
}

// profileMiss profiles the slow path behind a missed check of kind key.
// It returns what was profiled and the summary ("" when no profile
// applies).
func profileMiss(ctx context.Context, o Options, key string, r *Report, models *modelSet) (string, string, error) {
	model := func(spec ModelSpec) (*Model, error) {
		o.logf("profiling %s on %s", key, spec.Name())
		return models.get(spec)
	}
	switch key {
	case keyRestartGo:
		m, err := model(ModelSpec{Bytes: o.SmallBytes, Tensors: o.FewTensors})
		if err != nil {
			return "", "", err
		}
		top, err := profileRestartAttach(ctx, o, m)
		return fmt.Sprintf("the Go attach path (checkpoint digest, dial, attach, map, unmap, release) in a %s loop against core/daemon in-process", o.ProfileLoop), top, err
	case keyRestartPython:
		m, err := model(ModelSpec{Bytes: o.SmallBytes, Tensors: o.FewTensors})
		if err != nil {
			return "", "", err
		}
		top, err := profilePythonAttach(ctx, o, m, pythonProfileRounds)
		return fmt.Sprintf("the Python attach path (wcache.checkpoint_digest, wcache.attach, tensors(), release) in a fresh "+
			"process against a real daemon of the %d-tensor checkpoint, %d rounds under cProfile (pstats)", m.Tensors,
			pythonProfileRounds), top, err
	case keyAttachP50, keyAttachFlat:
		m, err := model(ModelSpec{Bytes: o.SmallBytes, Tensors: o.ManyTensors})
		if err != nil {
			return "", "", err
		}
		top, err := profileAttach(ctx, o, m)
		return fmt.Sprintf("attach + release of %d tensors in a %s loop, client and core/daemon in one process", m.Tensors, o.ProfileLoop), top, err
	case keyFillWarm, keyFillCold:
		if r.Fill == nil {
			return "", "", nil
		}
		m, err := model(ModelSpec{Bytes: o.LargeBytes, Tensors: o.FewTensors})
		if err != nil {
			return "", "", err
		}
		top, err := profileFill(ctx, o, m)
		return fmt.Sprintf("the mock backend's Load of the %s checkpoint (page cache warm) into fresh allocations, in-process "+
			"(the code the plugin runs), %d load workers; only the load workers' samples (-focus)", human(m.Bytes), mockLoadWorkers()), top, err
	case keyStartup:
		m, err := model(ModelSpec{Bytes: o.LargeBytes, Tensors: o.FewTensors})
		if err != nil {
			return "", "", err
		}
		top, err := profileStartup(ctx, o, m)
		return fmt.Sprintf("core/daemon.Start of the %s checkpoint on an in-process mock backend (process and plugin start excluded; "+
			"the load's own samples left out with -ignore, the overhead being the time beside the load)", human(m.Bytes)), top, err
	}
	return "", "", nil
}

// why explains a missed check from the run's own figures.
func why(c *Check, r *Report) string {
	switch c.key {
	case keyRestartGo, keyRestartPython:
		return whyRestart(c, r.Restart)
	case keyFillWarm:
		return whyFillWarm(r.Fill, r.Machine)
	case keyFillCold:
		return whyFillCold(r.Fill)
	case keyStartup:
		return whyStartup(c, r.Startup)
	case keyFootGrowth, keyFootSteady:
		return "The daemon's or the plugin's memory beyond the arena exceeds the target: see the table of row 5 for which field grows."
	case keyConcErrors, keyConcLeases:
		if r.Concurrency != nil && len(r.Concurrency.FirstErrors) > 0 {
			return "First errors: " + strings.Join(r.Concurrency.FirstErrors, "; ")
		}
		return "Leases were still open on the daemon after every client had released its own: a lease leak."
	case keyAttachP50, keyAttachFlat:
		return "Attach latency above the target: the profile below shows where the time goes."
	}
	return ""
}

func whyRestart(c *Check, res *RestartResult) string {
	if res == nil {
		return ""
	}
	lang, read, attach := "go", variantGoRead, variantGoAttach
	if c.key == keyRestartPython {
		lang, read, attach = "python", variantPyRead, variantPyAttach
	}
	var rv, av *RestartVariant
	for i := range res.Variants {
		switch res.Variants[i].Name {
		case read:
			rv = &res.Variants[i]
		case attach:
			av = &res.Variants[i]
		}
	}
	if rv == nil || av == nil || rv.Work.MedianMS == 0 {
		return ""
	}
	// The read costs time per byte, the attach a fixed time: the ratio
	// grows with the checkpoint, and reaches 100× at this size.
	msPerByte := rv.Work.MedianMS / float64(res.Model.Bytes)
	breakEven := uint64(restartRatioGoal * av.Work.MedianMS / msPerByte)
	return fmt.Sprintf("The %s read path copies every byte (%s at %s GiB/s from the page cache, median; its runs took "+
		"%s–%s); the attach path costs a fixed %s (%s) whatever the size. The ratio therefore grows with the "+
		"checkpoint: at this attach cost and read rate it reaches 100× from about %s, and the %s checkpoint measured "+
		"here is smaller. Run with a larger WCACHE_BENCH_GIB (memory permitting) to see it.", lang, human(res.Model.Bytes),
		num(float64(res.Model.Bytes)/(1<<30)/(rv.Work.MedianMS/1000)), msStr(rv.Work.MinMS), msStr(rv.Work.MaxMS),
		msStr(av.Work.MedianMS), steps(av.StepsMS), human(breakEven), human(res.Model.Bytes))
}

// notes are caveats that apply to the whole run.
func notes(o Options, r *Report) []string {
	var out []string
	if r.Machine.Virtualized {
		out = append(out, "The machine is a virtual machine: a read after dropping the guest's page cache may still be served by the host's cache, so \"cold\" is an upper bound on a cold read.")
	}
	if r.Machine.Cores <= 2 {
		out = append(out, fmt.Sprintf("Only %d cores: the daemon, its plugin, the clients and the harness share them, and other work on the machine adds noise; medians and same-run ratios keep the comparisons fair, absolute figures are modest.", r.Machine.Cores))
	}
	if r.Commit.Dirty {
		out = append(out, "The tree had uncommitted changes when this ran (other work in progress); the commit above is the base.")
	}
	return out
}
