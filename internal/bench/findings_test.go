package bench

import (
	"context"
	"strings"
	"testing"
)

func TestExplainMissedTargetsFromTheRunsFigures(t *testing.T) {
	model := Model{Bytes: 4 << 30, Tensors: 300}
	r := &Report{
		Fill: &FillResult{Model: model,
			Warm: FillVariant{DaemonGiBps: 3, SeqReadGiBps: 20, MemcpyGiBps: 22, ArenaReadGiBps: 2.5, ArenaParallelGiBps: 3.2,
				Workers: 2, PluginMinorFaults: 1048600, PagesLoaded: 1048576,
				DaemonLoad: Summary{N: 3, MedianMS: 1365, MinMS: 1000, MaxMS: 2000}},
			Cold: &FillVariant{DaemonGiBps: 1, SeqReadGiBps: 3, ArenaReadGiBps: 1.2, ArenaParallelGiBps: 0.9, Workers: 2}},
		Startup: &StartupResult{Cases: []StartupCase{{Model: model, Overhead: Summary{MedianMS: 1026},
			ArenaAlloc: Summary{MedianMS: 999}, OverheadLessAllocMS: 27}}},
	}
	r.Checks = []Check{
		atLeast(keyFillWarm, fillRowID, "warm", 0.15, fillRatioGoal, "×"),
		atLeast(keyFillCold, fillRowID, "cold", 0.33, fillRatioGoal, "×"),
		atMost(keyStartup, startupRowID, "start to ready minus load, median, 4096 MiB", 1026, startupGoalMS, "ms"),
		atMost(keyAttachP50, attachRowID, "attach p50", 0.3, attachP50GoalMS, "ms"),
	}
	fs := explain(context.Background(), Options{Profile: false}, r, nil)
	if len(fs) != 3 {
		t.Fatalf("%d findings for 3 missed targets: %+v", len(fs), fs)
	}
	for _, want := range []string{"3 GiB/s", "2–4 GiB/s", "3.2 GiB/s with the mock's 2 workers", "1048600 minor page faults"} {
		if !strings.Contains(fs[0].Why, want) {
			t.Errorf("warm fill finding lacks %q:\n%s", want, fs[0].Why)
		}
	}
	for _, want := range []string{"1/(1/3 + 1/2.5) = 1.364 GiB/s", "even slower than one reader"} {
		if !strings.Contains(fs[1].Why, want) {
			t.Errorf("cold fill finding lacks %q:\n%s", want, fs[1].Why)
		}
	}
	if !strings.Contains(fs[2].Why, "999 ms is reserving the arena") || !strings.Contains(fs[2].Why, "27 ms remain") {
		t.Errorf("start-up finding:\n%s", fs[2].Why)
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

func TestWhyFillWarmTellsSpreadFromSystematicSlowness(t *testing.T) {
	f := &FillResult{Model: Model{Bytes: 1 << 30}, Warm: FillVariant{DaemonGiBps: 1, ArenaParallelGiBps: 3, Workers: 2,
		DaemonLoad: Summary{MinMS: 200, MaxMS: 1100}}}
	for _, c := range []struct {
		daemon, bare []float64
		want         string
	}{
		{[]float64{0.9, 1, 1.1}, []float64{3, 3, 3}, "stays below 0.8× of the bare pattern measured right after it (0.3–0.3667×)"},
		{[]float64{1, 1, 5}, []float64{3, 3, 4}, "goes from 0.3333× to 1.25×"},
	} {
		f.Warm.Samples = map[string][]float64{"daemon": c.daemon, "arena_parallel": c.bare}
		if why := whyFillWarm(f); !strings.Contains(why, c.want) {
			t.Errorf("daemon %v, bare %v: why lacks %q:\n%s", c.daemon, c.bare, c.want, why)
		}
	}
	f.Warm.DaemonGiBps = 2.9
	if why := whyFillWarm(f); !strings.Contains(why, "The destination sets the rate, not wcache.") {
		t.Errorf("daemon at its bare pattern's rate:\n%s", why)
	}
}
