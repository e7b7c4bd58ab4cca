package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
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

// profileReading is what the profile of group says, when its top shows it.
func profileReading(group, top string) string {
	switch {
	case group == "fill" && strings.Contains(top, "unix.Pread"):
		return " The profile: the time is inside the pread system call (the kernel's copy and page faults), not in wcache code."
	case group == keyStartup:
		return " Go's CPU profiler samples a long system call only once, when it returns, so the fallocate shows as a few " +
			"samples at most: the wall-clock split above is the measurement; the profile beside the load shows no hot " +
			"wcache code."
	}
	return ""
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
		return fmt.Sprintf("the mock backend's Load of the %s checkpoint (page cache warm) in-process, the code the plugin runs", human(m.Bytes)), top, err
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
		return whyFillWarm(r.Fill)
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

func whyFillWarm(f *FillResult) string {
	if f == nil {
		return ""
	}
	w := f.Warm
	s := fmt.Sprintf("The daemon fills at %s GiB/s (median; %s–%s GiB/s over the runs); a plain read runs at %s GiB/s and "+
		"memcpy at %s GiB/s, both writing into a small buffer that stays in the CPU cache. The daemon writes into a fresh "+
		"%s arena instead. The same files preaded into a freshly fallocated, mapped shared-memory file — the mock's "+
		"situation, without wcache — go at %s GiB/s with one thread and %s GiB/s with the mock's %d workers and 8 MiB "+
		"chunks; the daemon reaches %s× of the latter.", num(w.DaemonGiBps), num(gibps(f.Model.Bytes, msDuration(w.DaemonLoad.MaxMS))),
		num(gibps(f.Model.Bytes, msDuration(w.DaemonLoad.MinMS))), num(w.SeqReadGiBps), num(w.MemcpyGiBps), human(f.Model.Bytes),
		num(w.ArenaReadGiBps), num(w.ArenaParallelGiBps), w.Workers, num(ratio(w.DaemonGiBps, w.ArenaParallelGiBps)))
	// Each daemon run is followed by its bare-pattern run: compare pairs.
	var pairs []float64
	d, b := w.Samples["daemon"], w.Samples["arena_parallel"]
	for i := range min(len(d), len(b)) {
		pairs = append(pairs, ratio(d[i], b[i]))
	}
	switch {
	case w.DaemonGiBps >= 0.8*w.ArenaParallelGiBps:
		s += " The destination sets the rate, not wcache."
	case len(pairs) > 0 && slices.Max(pairs) < 0.8:
		s += fmt.Sprintf(" Run by run, the daemon stays below 0.8× of the bare pattern measured right after it (%s–%s×): "+
			"the mock's Load costs beyond the pattern itself — see the profile.", num(slices.Min(pairs)), num(slices.Max(pairs)))
	case len(pairs) > 0:
		s += fmt.Sprintf(" Run by run, the daemon's rate over the bare pattern measured right after it goes from %s× to "+
			"%s×: rates into fresh memory spread widely on this machine, for the daemon and the bare pattern alike "+
			"(ranges in row 3), so the gap between their medians is not a constant cost of the daemon.",
			num(slices.Min(pairs)), num(slices.Max(pairs)))
	}
	return s + fmt.Sprintf(" The plugin took %d minor page faults for %d pages loaded: every 4 KiB page of the new mapping "+
		"faults once inside pread's copy. A GPU backend does not pay this (it reads into pinned, reused staging buffers); "+
		"for the mock, huge pages on the arena (shmem MADV_HUGEPAGE or hugetlbfs) would cut the faults 512-fold, and "+
		"pre-faulting it at Allocate (MADV_POPULATE_WRITE) would move them out of the load.", w.PluginMinorFaults, w.PagesLoaded)
}

// msDuration converts float milliseconds back to a duration.
func msDuration(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func whyFillCold(f *FillResult) string {
	if f == nil || f.Cold == nil {
		return ""
	}
	c := f.Cold
	s := fmt.Sprintf("Cold, the daemon fills at %s GiB/s and one sequential reader into a small buffer reads at %s GiB/s. "+
		"Without wcache, the same files preaded cold into a fresh arena go at %s GiB/s with one thread and %s GiB/s "+
		"with the mock's %d workers and 8 MiB chunks; the daemon runs at %s× of that pattern.", num(c.DaemonGiBps),
		num(c.SeqReadGiBps), num(c.ArenaReadGiBps), num(c.ArenaParallelGiBps), c.Workers,
		num(ratio(c.DaemonGiBps, c.ArenaParallelGiBps)))
	if f.Warm.ArenaReadGiBps > 0 && c.SeqReadGiBps > 0 {
		serial := 1 / (1/c.SeqReadGiBps + 1/f.Warm.ArenaReadGiBps)
		s += fmt.Sprintf(" Reading from disk and filling a fresh arena add up when one thread does both: 1/(1/%s + 1/%s) = "+
			"%s GiB/s expected from the disk rate and the warm fresh-arena rate, %s measured.", num(c.SeqReadGiBps),
			num(f.Warm.ArenaReadGiBps), num(serial), num(c.ArenaReadGiBps))
		if c.ArenaParallelGiBps > c.ArenaReadGiBps {
			s += " Several workers overlap the two only partly on two cores."
		}
		s += " Keeping the disk busy while the copy runs elsewhere — O_DIRECT reads into pinned staging as the CUDA " +
			"backend does, or a prefaulted or huge-page arena for the mock — should let the fill approach the disk's rate."
	}
	if c.ArenaParallelGiBps < 0.8*c.ArenaReadGiBps {
		s += " Here several workers preading interleaved 8 MiB chunks are even slower than one reader: the request " +
			"pattern of the mock's Load costs on this disk as well."
	}
	return s
}

func whyStartup(c *Check, s *StartupResult) string {
	if s == nil {
		return ""
	}
	for _, sc := range s.Cases {
		if !strings.Contains(c.Metric, fmt.Sprintf(", %d MiB", sc.Model.Bytes>>20)) {
			continue
		}
		return fmt.Sprintf("Of the %s overhead, %s is reserving the arena: the mock's Allocate fallocates a shared-memory "+
			"file of the model's size, and tmpfs allocates and zeroes every page (measured apart in the same run: "+
			"%s for %s). That part grows with the model and is outside the daemon's load time. Without it %s remain "+
			"for process and plugin start, headers, plan, digest, lock, export, listening and the ready file (phases "+
			"in row 6). On a GPU, cuMemAlloc does not zero memory.",
			msStr(sc.Overhead.MedianMS), msStr(sc.ArenaAlloc.MedianMS), msStr(sc.ArenaAlloc.MedianMS), human(sc.Model.Bytes),
			msStr(sc.OverheadLessAllocMS))
	}
	return ""
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
