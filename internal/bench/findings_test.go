package bench

import (
	"context"
	"strings"
	"testing"
)

// warmFill is a warm fill variant shaped like the pwrite-based mock on a
// 2-core VM: few plugin faults, page allocation about 1 µs per page, a
// ceiling below the target's baselines.
func warmFill() FillVariant {
	return FillVariant{DaemonGiBps: 2.7, SeqReadGiBps: 23, MemcpyGiBps: 25, Workers: 2,
		DaemonEndToEndGiBps: 2.6, EndToEndRatio: 0.113, PluginMinorFaults: 1221, PagesLoaded: 1048576,
		MockPattern:     &Probe{FillGiBps: 3, Allocate: Summary{MedianMS: 0.1}, Fill: Summary{MedianMS: 1300}},
		PreviousPattern: &Probe{FillGiBps: 4, Allocate: Summary{MedianMS: 990}, Fill: Summary{MedianMS: 1000}},
		FreshMemcpy:     &Probe{FillGiBps: 2.2, MinorFaultsPerPage: 1.0},
		FreshWrite:      &Probe{FillGiBps: 3.5}, AllocatedWrite: &Probe{FillGiBps: 9}, PageAllocUS: 0.95,
		MockAllocate: Summary{N: 3, MedianMS: 0.2},
		Samples:      map[string][]float64{sampleDaemon: {2, 2.7, 2.9}, samplePattern: {3, 3, 3.1}}}
}

func TestExplainMissedTargetsFromTheRunsFigures(t *testing.T) {
	model := Model{Bytes: 4 << 30, Tensors: 300}
	r := &Report{
		Machine: Machine{ShmemTHP: "never"},
		Fill: &FillResult{Model: model, Warm: warmFill(),
			Cold: &FillVariant{DaemonGiBps: 1.3, SeqReadGiBps: 4, Workers: 2, MockPattern: &Probe{FillGiBps: 1.5},
				DaemonEndToEndGiBps: 1.25, EndToEndRatio: 0.42}},
		Startup: &StartupResult{Cases: []StartupCase{{Model: model, Overhead: Summary{MedianMS: 260},
			MockAllocate: Summary{N: 5, MedianMS: 0.2}, OverheadLessAllocMS: 259.8,
			PhasesMS: map[string]float64{phasePlugin: 5, phasePrepare: 4, phaseRest: 240, phaseLoad: 1300}}}},
	}
	r.Checks = []Check{
		atLeast(keyFillWarm, fillRowID, "warm", 0.118, fillRatioGoal, "×"),
		atLeast(keyFillCold, fillRowID, "cold", 0.43, fillRatioGoal, "×"),
		atMost(keyStartup, startupRowID, "start to ready minus load, median, 4096 MiB", 260, startupGoalMS, "ms"),
		atMost(keyAttachP50, attachRowID, "attach p50", 0.3, attachP50GoalMS, "ms"),
	}
	fs := explain(context.Background(), Options{Profile: false}, r, nil)
	if len(fs) != 3 {
		t.Fatalf("%d findings for 3 missed targets: %+v", len(fs), fs)
	}
	for _, want := range []string{"2.7 GiB/s (median; 2–2.9 GiB/s over the runs)", "1221 minor page faults",
		"does not allocate its pages through page faults", "fills at 3 GiB/s", "reaches 0.9× of it",
		"The pattern, not wcache, sets the daemon's rate.", "0.95 µs per 4 KiB page", "This is of the order of the mock's author's",
		`huge pages for shmem are "never"`, "not measured here", "Writing through the file allocated pages faster",
		"with or without a file read, runs at 3.5 GiB/s: 0.1522× of the slower baseline", "even without reading a file, stays below 0.8×",
		"fills at 2.6 GiB/s, 0.113× of the sequential read", "caps a fill of fresh shared memory done this way at 4.015 GiB/s", "takes 0.2 ms (median)",
		"990 ms + 1000 ms = 1990 ms", "1.531× faster end to end", "1.3× the previous fill's time"} {
		if !strings.Contains(fs[0].Why, want) {
			t.Errorf("warm fill finding lacks %q:\n%s", want, fs[0].Why)
		}
	}
	// The old fixed story must not come back with figures that contradict it.
	for _, stale := range []string{"every 4 KiB page", "MADV_POPULATE_WRITE", "huge pages on the arena", "fallocates a shared-memory"} {
		if strings.Contains(fs[0].Why, stale) || strings.Contains(fs[2].Why, stale) {
			t.Errorf("finding says %q", stale)
		}
	}
	for _, want := range []string{"1/(1/4 + 1/3) = 1.714 GiB/s", "no better than one after the other",
		"even a full overlap leaves a cold fill below the target", "0.42× of the read"} {
		if !strings.Contains(fs[1].Why, want) {
			t.Errorf("cold fill finding lacks %q:\n%s", want, fs[1].Why)
		}
	}
	for _, want := range []string{"takes 0.2 ms, leaving 259.8 ms", `"allocate, export, listen, ready file" at 240 ms`} {
		if !strings.Contains(fs[2].Why, want) {
			t.Errorf("start-up finding lacks %q:\n%s", want, fs[2].Why)
		}
	}
	if strings.Contains(fs[2].Why, "most of the overhead") {
		t.Errorf("start-up finding calls a 0.2 ms allocation most of 260 ms:\n%s", fs[2].Why)
	}
	for i, c := range r.Checks[:3] {
		if c.Why != fs[i].Why {
			t.Errorf("check %d carries why %q, finding %q", i, c.Why, fs[i].Why)
		}
		if fs[i].Profile != "" {
			t.Errorf("finding %d has a profile with Profile off", i)
		}
	}
}

func TestWhyFillWarmFollowsTheFaultCount(t *testing.T) {
	f := &FillResult{Model: Model{Bytes: 1 << 30}, Warm: warmFill()}
	f.Warm.PluginMinorFaults = 1048600
	if why := whyFillWarm(f, Machine{}); !strings.Contains(why, "its pages are allocated through page faults during the copy") {
		t.Errorf("one fault per page:\n%s", why)
	}
	f.Warm.PluginMinorFaults = 300000
	if why := whyFillWarm(f, Machine{}); !strings.Contains(why, "part of its pages") {
		t.Errorf("a fault for some pages:\n%s", why)
	}
}

func TestWhyFillWarmTellsSpreadFromSystematicSlowness(t *testing.T) {
	f := &FillResult{Model: Model{Bytes: 1 << 30}, Warm: FillVariant{DaemonGiBps: 1, Workers: 2,
		MockPattern: &Probe{FillGiBps: 3}}}
	for _, c := range []struct {
		daemon, bare []float64
		want         string
	}{
		{[]float64{0.9, 1, 1.1}, []float64{3, 3, 3}, "stays below 0.8× of the pattern measured right after it (0.3–0.3667×)"},
		{[]float64{1, 1, 5}, []float64{3, 3, 4}, "goes from 0.3333× to 1.25×"},
	} {
		f.Warm.Samples = map[string][]float64{sampleDaemon: c.daemon, samplePattern: c.bare}
		if why := whyFillWarm(f, Machine{}); !strings.Contains(why, c.want) {
			t.Errorf("daemon %v, pattern %v: why lacks %q:\n%s", c.daemon, c.bare, c.want, why)
		}
	}
	f.Warm.DaemonGiBps = 2.9
	if why := whyFillWarm(f, Machine{}); !strings.Contains(why, "The pattern, not wcache, sets the daemon's rate.") {
		t.Errorf("daemon at its pattern's rate:\n%s", why)
	}
}

func TestWhyFillWarmCeilingAndAuthorCitation(t *testing.T) {
	f := &FillResult{Model: Model{Bytes: 1 << 30}, Warm: warmFill()}
	// Fills of fresh memory that leave room for the target, and a page
	// cost far from the author's that the fills measured exceed: the text
	// must say so rather than repeat the story.
	f.Warm.SeqReadGiBps, f.Warm.MemcpyGiBps = 4, 5
	f.Warm.FreshWrite.FillGiBps, f.Warm.PageAllocUS = 3.6, 3
	why := whyFillWarm(f, Machine{})
	for _, want := range []string{"Filling fresh shared memory can reach the target here", "The mock's author measured about 1 µs per page",
		"adds 3 µs of wall time per 4 KiB page here (2 writers)", "take comparable time"} {
		if !strings.Contains(why, want) {
			t.Errorf("why lacks %q:\n%s", want, why)
		}
	}
	for _, wrong := range []string{"of the order of", "even without reading a file", "caps a fill", "slow half"} {
		if strings.Contains(why, wrong) {
			t.Errorf("why says %q, which its figures contradict:\n%s", wrong, why)
		}
	}
	// A slower current pattern end to end is called slower.
	f.Warm.PreviousPattern = &Probe{FillGiBps: 4, Allocate: Summary{MedianMS: 10}, Fill: Summary{MedianMS: 1000}}
	if why := whyFillWarm(f, Machine{}); !strings.Contains(why, "1.287× slower end to end") {
		t.Errorf("slower current pattern:\n%s", why)
	}
}

func TestWhyFillWarmSaysWhenMediansContradictTheWork(t *testing.T) {
	f := &FillResult{Model: Model{Bytes: 1 << 30}, Warm: warmFill()}
	f.Warm.FreshWrite.FillGiBps = 2.5
	if why := whyFillWarm(f, Machine{}); !strings.Contains(why, "which the work alone does not explain") {
		t.Errorf("pattern faster than the no-read fills, steady rates:\n%s", why)
	}
	f.Warm.Samples[sampleFreshWrite] = []float64{1.2, 2.5, 3.1}
	if why := whyFillWarm(f, Machine{}); !strings.Contains(why, "these medians order the fills only roughly") {
		t.Errorf("pattern faster than the no-read fills, spread rates:\n%s", why)
	}
	f.Warm.FreshWrite.FillGiBps = 3.5
	if why := whyFillWarm(f, Machine{}); strings.Contains(why, "measured faster (median) than the fills that read nothing") {
		t.Errorf("no-read fills faster, yet:\n%s", why)
	}
}

func TestWhyFillColdChoosesTheOverlap(t *testing.T) {
	for _, c := range []struct {
		cold float64
		want string
	}{
		{1.45, "no better than one after the other"},
		{2.9, "close to full overlap"},
		{2.2, "overlap the disk reads with the writes only partly"},
	} {
		f := &FillResult{Warm: FillVariant{MockPattern: &Probe{FillGiBps: 3}},
			Cold: &FillVariant{DaemonGiBps: 1, SeqReadGiBps: 3, Workers: 2, MockPattern: &Probe{FillGiBps: c.cold}}}
		if why := whyFillCold(f); !strings.Contains(why, c.want) {
			t.Errorf("cold pattern at %v GiB/s: why lacks %q:\n%s", c.cold, c.want, why)
		}
	}
	f := &FillResult{Warm: FillVariant{MockPattern: &Probe{FillGiBps: 10}},
		Cold: &FillVariant{DaemonGiBps: 1, SeqReadGiBps: 3, Workers: 2, MockPattern: &Probe{FillGiBps: 2}}}
	if why := whyFillCold(f); !strings.Contains(why, "A full overlap would bring the cold fill to the disk's read rate.") {
		t.Errorf("fast warm pattern:\n%s", why)
	}
}

func TestWhyRestartGivesTheBreakEvenSize(t *testing.T) {
	res := &RestartResult{Model: Model{Bytes: 512 << 20}, Variants: []RestartVariant{
		{Name: variantGoRead, Work: Summary{MedianMS: 256}},
		{Name: variantGoAttach, Work: Summary{MedianMS: 4}, StepsMS: map[string]float64{"digest": 2, "attach": 2}},
	}}
	c := atLeast(keyRestartGo, restartScenarioID, "Go", 64, restartRatioGoal, "×")
	why := whyRestart(&c, res)
	// 100 × 4 ms at 2 MiB/ms is 800 MiB.
	if !strings.Contains(why, "800.0 MiB") || !strings.Contains(why, "digest 2 ms · attach 2 ms") {
		t.Errorf("whyRestart:\n%s", why)
	}
}

func TestWhyFillCallsAFasterDaemonFaster(t *testing.T) {
	f := &FillResult{Model: Model{Bytes: 1 << 30}, Warm: warmFill()}
	f.Warm.DaemonGiBps = 4
	f.Warm.Samples[sampleDaemon] = []float64{4, 4.1, 3.9}
	why := whyFillWarm(f, Machine{})
	if !strings.Contains(why, "ran faster than the pattern by median (run by run, 1.258× to 1.367×") ||
		strings.Contains(why, "sets the daemon's rate") {
		t.Errorf("daemon faster than its pattern:\n%s", why)
	}
	// End-to-end medians of spread runs are called rough.
	f.Warm.Samples[samplePatternEnd] = []float64{1.3, 2.8, 1.7}
	f.Warm.Samples[samplePreviousEnd] = []float64{1.9, 2.3}
	if why := whyFillWarm(f, Machine{}); !strings.Contains(why, "overlap (current 1.3–2.8 GiB/s, previous 1.9–2.3 GiB/s)") {
		t.Errorf("overlapping end-to-end rates:\n%s", why)
	}
	f.Warm.Samples[samplePreviousEnd] = []float64{3.1, 3.3}
	if why := whyFillWarm(f, Machine{}); strings.Contains(why, "either way") {
		t.Errorf("separate end-to-end rates called interchangeable:\n%s", why)
	}
}

func TestWhyFillColdAboveTheOverlapBound(t *testing.T) {
	f := &FillResult{Warm: FillVariant{MockPattern: &Probe{FillGiBps: 1.75},
		Samples: map[string][]float64{samplePattern: {1.3, 1.75, 2.8}}},
		Cold: &FillVariant{DaemonGiBps: 1.57, SeqReadGiBps: 3.1, Workers: 2, MockPattern: &Probe{FillGiBps: 2.05}}}
	why := whyFillCold(f)
	for _, want := range []string{"faster than even a full overlap", "runs range 1.3–2.8 GiB/s", "reached 0.6613× of the disk's read"} {
		if !strings.Contains(why, want) {
			t.Errorf("why lacks %q:\n%s", want, why)
		}
	}
	for _, wrong := range []string{"close to full overlap", "even a full overlap leaves"} {
		if strings.Contains(why, wrong) {
			t.Errorf("why says %q:\n%s", wrong, why)
		}
	}
}
