package bench

import (
	"fmt"
	"slices"
	"strings"
)

// Explanations of rows 3 and 6 when a target is missed. Every sentence is
// chosen by the run's own figures; what only the mock's author measured is
// cited as such, never presented as this run's measurement.

// mockAuthorSource is where the mock's author's measurements are written up.
const mockAuthorSource = "docs/mock-backend.md, commit 1af0940"

// Thresholds that choose the explanations' sentences.
const (
	// faultsHigh: at least this many plugin minor faults per page loaded
	// means the pages were allocated through faults; faultsLow or fewer
	// means they were not.
	faultsHigh = 0.5
	faultsLow  = 0.05
	// closeTo is the share of a reference a rate must reach to be set by
	// it (the target's own 0.8).
	closeTo = fillRatioGoal
	// dominates: one cost is this many times the other.
	dominates = 1.5
	// authorPageUS is the mock's author's page-allocation cost (µs per
	// 4 KiB page); a measured cost within agreeLow–agreeHigh times it
	// agrees with it. authorSpeedup4GiB is the author's end-to-end gain of
	// the current pattern over the previous one at 4 GiB.
	authorPageUS        = 1.0
	agreeLow, agreeHigh = 0.5, 2.0
	authorSpeedup4GiB   = 1.35
	// A cold fill within serialSlack of the one-after-the-other estimate
	// overlaps nothing; one at fullish of the fully overlapped bound or
	// more overlaps nearly all.
	serialSlack, fullish = 1.1, 0.9
)

// sentences builds an explanation one formatted piece at a time.
type sentences struct{ b strings.Builder }

func (s *sentences) p(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }
func (s *sentences) String() string               { return strings.TrimSpace(s.b.String()) }

// runRange is "; lo–hi GiB/s over the runs" for two runs or more.
func runRange(samples []float64) string {
	if len(samples) < 2 {
		return ""
	}
	return fmt.Sprintf("; %s–%s GiB/s over the runs", num(slices.Min(samples)), num(slices.Max(samples)))
}

// rangeText is "lo–hi GiB/s" of samples, or "—" when there are none.
func rangeText(samples []float64) string {
	if len(samples) == 0 {
		return "—"
	}
	return fmt.Sprintf("%s–%s GiB/s", num(slices.Min(samples)), num(slices.Max(samples)))
}

// rangesOverlap reports whether the ranges of two samples of two runs or
// more overlap.
func rangesOverlap(a, b []float64) bool {
	if len(a) < 2 || len(b) < 2 {
		return false
	}
	return slices.Min(a) <= slices.Max(b) && slices.Min(b) <= slices.Max(a)
}

// pairRatios are a[i]/b[i] for the runs both have.
func pairRatios(a, b []float64) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		out = append(out, ratio(a[i], b[i]))
	}
	return out
}

// pageCapGiBps is the fill rate a cost of us µs per 4 KiB page allows.
func pageCapGiBps(us float64) float64 {
	if us <= 0 {
		return 0
	}
	return pageSize / (us * 1e-6) / (1 << 30)
}

func whyFillWarm(f *FillResult, mach Machine) string {
	if f == nil {
		return ""
	}
	w := f.Warm
	var s sentences
	d, read := w.DaemonGiBps, w.SeqReadGiBps
	base := read
	if w.MemcpyGiBps > 0 {
		base = min(base, w.MemcpyGiBps)
	}
	s.p("The daemon's Load runs at %s GiB/s (median%s). The target's baselines, a sequential read (%s GiB/s) and a "+
		"memcpy (%s GiB/s), write into buffers that are already in memory; the daemon's Load fills a fresh %s "+
		"allocation of shared memory.", num(d), runRange(w.Samples[sampleDaemon]), num(read), num(w.MemcpyGiBps),
		human(f.Model.Bytes))
	if w.PagesLoaded > 0 {
		fp := float64(w.PluginMinorFaults) / float64(w.PagesLoaded)
		s.p(" The plugin took %d minor page faults from start to ready for %d pages loaded (%s per page)", w.PluginMinorFaults,
			w.PagesLoaded, num(fp))
		switch {
		case fp >= faultsHigh:
			s.p(": its pages are allocated through page faults during the copy.")
		case fp <= faultsLow:
			s.p(": the fill does not allocate its pages through page faults.")
		default:
			s.p(": part of its pages are allocated through page faults.")
		}
	}
	explainPattern(&s, w)
	explainWrites(&s, w, mach)
	explainCeiling(&s, w, base)
	explainEndToEnd(&s, w)
	return s.String()
}

// explainPattern compares the daemon with the mock's pattern without wcache.
func explainPattern(s *sentences, w FillVariant) {
	pat := w.MockPattern
	if pat == nil || pat.FillGiBps <= 0 {
		return
	}
	d, b := w.DaemonGiBps, pat.FillGiBps
	s.p(" The mock's own pattern without wcache — a new sparse file in the same shared-memory folder, then %d workers "+
		"copying 8 MiB chunks through a reused 1 MiB buffer each, pread from the checkpoint and pwrite at the "+
		"destination — measured right after each daemon run, fills at %s GiB/s (its ftruncate + mmap: %s); the "+
		"daemon's Load reaches %s× of it.", w.Workers, num(b), msStr(pat.Allocate.MedianMS), num(ratio(d, b)))
	pairs := pairRatios(w.Samples[sampleDaemon], w.Samples[samplePattern])
	switch {
	case d > b/closeTo:
		s.p(" The daemon's Load ran faster than the pattern by median")
		if len(pairs) > 0 {
			s.p(" (run by run, %s× to %s× of the pattern measured right after it)", num(slices.Min(pairs)), num(slices.Max(pairs)))
		}
		s.p(": wcache adds no measurable cost to the pattern")
		if spreads(w.Samples[samplePattern]) || spreads(w.Samples[sampleDaemon]) {
			s.p(", and rates into fresh shared memory move widely from run to run here (ranges in row 3)")
		}
		s.p(".")
	case d >= closeTo*b:
		s.p(" The pattern, not wcache, sets the daemon's rate.")
	case len(pairs) > 0 && slices.Max(pairs) < closeTo:
		s.p(" Run by run, the daemon stays below %s× of the pattern measured right after it (%s–%s×): the mock's Load "+
			"costs more than the pattern itself — see the profile.", num(closeTo), num(slices.Min(pairs)), num(slices.Max(pairs)))
	case len(pairs) > 0:
		s.p(" Run by run, the daemon's rate over the pattern measured right after it goes from %s× to %s×: the gap "+
			"between the medians moves from run to run, it is not a constant cost of the daemon.",
			num(slices.Min(pairs)), num(slices.Max(pairs)))
	}
}

// explainWrites splits the pattern's cost with the write-only probes.
func explainWrites(s *sentences, w FillVariant, mach Machine) {
	fw, aw := w.FreshWrite, w.AllocatedWrite
	if fw == nil || aw == nil || fw.FillGiBps <= 0 || aw.FillGiBps <= 0 {
		return
	}
	s.p(" Without the read, pwriting a cached 1 MiB buffer over a new sparse file of the same size (%d workers) runs at "+
		"%s GiB/s, and over the same file once its pages exist at %s GiB/s", w.Workers, num(fw.FillGiBps), num(aw.FillGiBps))
	us := w.PageAllocUS
	switch capRate := pageCapGiBps(us); {
	case us <= 0:
		s.p(": allocating the pages costs nothing measurable here.")
	case freshFillMax(w) <= capRate:
		s.p(", so allocating the pages costs %s µs per 4 KiB page here (wall time, %d writers), which alone caps a fill "+
			"of fresh shared memory done this way at %s GiB/s.", num(us), w.Workers, num(capRate))
	default:
		s.p(", so allocating the pages adds %s µs of wall time per 4 KiB page here (%d writers).", num(us), w.Workers)
	}
	switch read := w.SeqReadGiBps; {
	case read > dominates*fw.FillGiBps:
		s.p(" Of the pattern's two halves, reading the checkpoint alone runs at %s GiB/s (the sequential read) and "+
			"writing fresh memory alone at %s GiB/s: the write is the slow half.", num(read), num(fw.FillGiBps))
	case fw.FillGiBps > dominates*read:
		s.p(" Of the pattern's two halves, reading the checkpoint alone runs at %s GiB/s (the sequential read) and "+
			"writing fresh memory alone at %s GiB/s: the read is the slow half.", num(read), num(fw.FillGiBps))
	default:
		s.p(" Reading the checkpoint alone (%s GiB/s, the sequential read) and writing fresh memory alone take "+
			"comparable time.", num(read))
	}
	thp := ""
	if mach.ShmemTHP != "" {
		thp = fmt.Sprintf("; transparent huge pages for shmem are %q on this machine", mach.ShmemTHP)
	}
	if us >= agreeLow*authorPageUS && us <= agreeHigh*authorPageUS {
		s.p(" This is of the order of the mock's author's measurement on this VM (%s): about %s µs per page with huge "+
			"pages for shmem off%s.", mockAuthorSource, num(authorPageUS), thp)
	} else {
		s.p(" The mock's author measured about %s µs per page on this VM with huge pages for shmem off (%s)%s.",
			num(authorPageUS), mockAuthorSource, thp)
	}
	s.p(" The author also found that writes to one tmpfs file serialise on its inode lock, so more workers overlap " +
		"reads with writes but do not write faster (not measured here).")
}

// freshFillMax is the highest median rate of the fills of fresh shared
// memory measured: the daemon's, the mock's pattern and the two that read
// no file.
func freshFillMax(w FillVariant) float64 {
	best := w.DaemonGiBps
	for _, pr := range []*Probe{w.MockPattern, w.FreshMemcpy, w.FreshWrite} {
		if pr != nil {
			best = max(best, pr.FillGiBps)
		}
	}
	return best
}

// explainCeiling compares the fills of fresh shared memory that read no
// file with the daemon, the mock's pattern and the target's baselines.
func explainCeiling(s *sentences, w FillVariant, base float64) {
	fm, fw := w.FreshMemcpy, w.FreshWrite
	noRead := 0.0
	if fm != nil && fm.FillGiBps > 0 {
		s.p(" A memcpy of the same size into the mapping of a new sparse file (%d workers, no file read) runs at %s GiB/s "+
			"(minor page faults per 4 KiB page: %s)", w.Workers, num(fm.FillGiBps), num(fm.MinorFaultsPerPage))
		if fm.MinorFaultsPerPage >= faultsHigh {
			s.p(": every page is allocated by a fault on first write")
		}
		s.p("; the daemon's Load reaches %s× of it.", num(ratio(w.DaemonGiBps, fm.FillGiBps)))
		noRead = fm.FillGiBps
		if fw != nil && fw.FillGiBps > 0 {
			if fw.FillGiBps > fm.FillGiBps {
				s.p(" Writing through the file allocated pages faster than faulting them in through a mapping.")
			} else {
				s.p(" Faulting pages in through a mapping was no slower than writing through the file.")
			}
		}
	}
	if fw != nil {
		noRead = max(noRead, fw.FillGiBps)
	}
	if pat := w.MockPattern; pat != nil && noRead > 0 && pat.FillGiBps > noRead {
		s.p(" The mock's pattern, which also reads the checkpoint, measured faster (median) than the fills that read " +
			"nothing")
		if spreads(w.Samples[samplePattern]) || spreads(w.Samples[sampleFreshWrite]) || spreads(w.Samples[sampleFreshMemcpy]) {
			s.p(": rates into fresh shared memory spread widely from run to run on this machine (ranges in row 3), so " +
				"these medians order the fills only roughly.")
		} else {
			s.p(", which the work alone does not explain.")
		}
	}
	best := freshFillMax(w)
	if best <= 0 || base <= 0 {
		return
	}
	s.p(" The fastest fill of fresh shared memory measured in this run, with or without a file read, runs at %s GiB/s: "+
		"%s× of the slower baseline.", num(best), num(best/base))
	if best < closeTo*base {
		s.p(" Every fill of fresh shared memory measured here, even without reading a file, stays below %s× of the "+
			"baselines, which allocate no memory; the daemon against the fills that read nothing is the figure that "+
			"measures it.", num(closeTo))
	} else {
		s.p(" Filling fresh shared memory can reach the target here: the daemon's distance to the fastest fill is the " +
			"cost to look at.")
	}
}

// explainEndToEnd gives Allocate + Load, and the previous pattern beside
// the current one.
func explainEndToEnd(s *sentences, w FillVariant) {
	if w.DaemonEndToEndGiBps > 0 {
		s.p(" End to end — from the daemon taking the device's identity lock to its ready file: Allocate and Load, "+
			"export and listening — the daemon fills at %s GiB/s, %s× of the sequential read", num(w.DaemonEndToEndGiBps),
			num(w.EndToEndRatio))
		if w.MockAllocate.N > 0 {
			s.p("; the mock's Allocate of the same arenas, timed in-process, takes %s (median)", msStr(w.MockAllocate.MedianMS))
		}
		s.p(".")
	}
	prev, pat := w.PreviousPattern, w.MockPattern
	if prev == nil || pat == nil || prev.Fill.MedianMS <= 0 || pat.Fill.MedianMS <= 0 {
		return
	}
	cur := pat.Allocate.MedianMS + pat.Fill.MedianMS
	old := prev.Allocate.MedianMS + prev.Fill.MedianMS
	s.p(" For reference, the mock's previous pattern (fallocate at Allocate, pread straight into the mapping), measured "+
		"in the same run, takes %s + %s = %s (allocation + fill) against %s + %s = %s for the current one",
		msStr(prev.Allocate.MedianMS), msStr(prev.Fill.MedianMS), msStr(old), msStr(pat.Allocate.MedianMS),
		msStr(pat.Fill.MedianMS), msStr(cur))
	switch {
	case old > cur:
		s.p(", which is %s× faster end to end", num(old/cur))
	case old < cur:
		s.p(", which is %s× slower end to end", num(cur/old))
	}
	if pat.Fill.MedianMS > prev.Fill.MedianMS && prev.Allocate.MedianMS > pat.Allocate.MedianMS {
		s.p("; its fill alone takes %s× the previous fill's time: the page allocation that the fallocate did up front "+
			"now happens during the fill", num(pat.Fill.MedianMS/prev.Fill.MedianMS))
	}
	s.p(" (the mock's author measured %s× end to end at 4 GiB: %s)", num(authorSpeedup4GiB), mockAuthorSource)
	if cur, prev := w.Samples[samplePatternEnd], w.Samples[samplePreviousEnd]; rangesOverlap(cur, prev) {
		s.p("; the two patterns' end-to-end rates over the runs overlap (current %s, previous %s), so one run's medians "+
			"can order them either way", rangeText(cur), rangeText(prev))
	}
	s.p(".")
}

func whyFillCold(f *FillResult) string {
	if f == nil || f.Cold == nil {
		return ""
	}
	c := f.Cold
	var s sentences
	read := c.SeqReadGiBps
	s.p("Cold, the daemon's Load runs at %s GiB/s and a sequential read from disk at %s GiB/s.", num(c.DaemonGiBps), num(read))
	if pc := c.MockPattern; pc != nil && pc.FillGiBps > 0 {
		bc := pc.FillGiBps
		s.p(" The mock's pattern without wcache, cold, fills at %s GiB/s; the daemon's Load reaches %s× of it", num(bc),
			num(ratio(c.DaemonGiBps, bc)))
		switch {
		case c.DaemonGiBps > bc/closeTo:
			s.p(": the daemon ran faster than the pattern, wcache adds no measurable cost.")
		case c.DaemonGiBps >= closeTo*bc:
			s.p(": the pattern, not wcache, sets the cold rate.")
		default:
			s.p(".")
		}
		if pw := f.Warm.MockPattern; pw != nil && pw.FillGiBps > 0 && read > 0 {
			b := pw.FillGiBps
			serial, overlap := 1/(1/read+1/b), min(read, b)
			s.p(" Cold, the pattern adds a disk read (%s GiB/s alone) to what it does warm (%s GiB/s: the page-cache read "+
				"and the write into fresh memory). One after the other these give 1/(1/%s + 1/%s) = %s GiB/s; fully "+
				"overlapped, the slower sets the rate, %s GiB/s. Measured: %s GiB/s", num(read), num(b), num(read), num(b),
				num(serial), num(overlap), num(bc))
			switch {
			case bc > overlap/fullish:
				s.p(", faster than even a full overlap with the warm pattern's median allows: that median is low in this "+
					"run (the warm pattern's runs range %s), so this estimate is rough. The cold pattern reached %s× of the "+
					"disk's read.", rangeText(f.Warm.Samples[samplePattern]), num(bc/read))
			case bc <= serialSlack*serial:
				s.p(", no better than one after the other: the %d workers do not overlap the disk reads with the writes here.", c.Workers)
			case bc >= fullish*overlap:
				s.p(", close to full overlap.")
			default:
				s.p(", in between: the %d workers overlap the disk reads with the writes only partly.", c.Workers)
			}
			switch {
			case bc > overlap/fullish:
			case overlap < closeTo*read:
				s.p(" The warm pattern alone runs at %s× of this disk's read, so even a full overlap leaves a cold fill below "+
					"the target.", num(b/read))
			case overlap >= read:
				s.p(" A full overlap would bring the cold fill to the disk's read rate.")
			default:
				s.p(" A full overlap would bring the cold fill to %s× of the disk's read.", num(overlap/read))
			}
		}
	}
	if c.DaemonEndToEndGiBps > 0 {
		s.p(" End to end (identity lock to ready file) the cold daemon fills at %s GiB/s, %s× of the read.",
			num(c.DaemonEndToEndGiBps), num(c.EndToEndRatio))
	}
	return s.String()
}

func whyStartup(c *Check, st *StartupResult) string {
	if st == nil {
		return ""
	}
	for _, sc := range st.Cases {
		if !strings.Contains(c.Metric, fmt.Sprintf(", %d MiB", sc.Model.Bytes>>20)) {
			continue
		}
		var s sentences
		over := sc.Overhead.MedianMS
		if sc.MockAllocate.N > 0 {
			alloc := sc.MockAllocate.MedianMS
			s.p("Of the %s overhead (start to ready minus the load), the mock's Allocate of the same arenas, timed "+
				"in-process in the same run, takes %s, leaving %s.", msStr(over), msStr(alloc), msStr(sc.OverheadLessAllocMS))
			if alloc >= 0.5*over {
				s.p(" Allocation is most of the overhead.")
			}
		}
		if name, v := largestPhase(sc.PhasesMS); name != "" {
			s.p(" The largest phase beside the load in serve's log is %q at %s (row 6).", name, msStr(v))
		}
		return s.String()
	}
	return ""
}

// largestPhase is the longest start-up phase other than the load.
func largestPhase(phases map[string]float64) (string, float64) {
	name, best := "", 0.0
	for _, ph := range phaseOrder() {
		if v, ok := phases[ph]; ok && ph != phaseLoad && v > best {
			name, best = ph, v
		}
	}
	return name, best
}
