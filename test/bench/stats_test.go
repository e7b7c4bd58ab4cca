package bench

import (
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
)

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := Summarize(ds)
	if s.N != 100 || s.MinMS != 1 || s.MaxMS != 100 {
		t.Fatalf("Summarize = %+v", s)
	}
	if s.MedianMS != 50.5 {
		t.Errorf("median = %v, want 50.5 (mean of the two middle values)", s.MedianMS)
	}
	if s.P99MS != 99 {
		t.Errorf("p99 = %v, want 99 (nearest rank)", s.P99MS)
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("Summarize reordered its input")
	}
}

func TestSummarizeSmallSamples(t *testing.T) {
	if s := Summarize(nil); s != (Summary{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", s)
	}
	s := Summarize([]time.Duration{3 * time.Millisecond})
	if s.MedianMS != 3 || s.P99MS != 3 || s.N != 1 {
		t.Errorf("one sample: %+v", s)
	}
	s = Summarize([]time.Duration{time.Millisecond, 2 * time.Millisecond, 9 * time.Millisecond})
	if s.MedianMS != 2 || s.P99MS != 9 {
		t.Errorf("three samples: %+v", s)
	}
}

func TestMedianAndRatio(t *testing.T) {
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median = %v, want 2.5", got)
	}
	if got := median[float64](nil); got != 0 {
		t.Errorf("median[float64](nil) = %v", got)
	}
	if got := ratio(3, 0); got != 0 {
		t.Errorf("ratio(3, 0) = %v, want 0 rather than infinity", got)
	}
	if got := ratio(3, 2); got != 1.5 {
		t.Errorf("ratio(3, 2) = %v", got)
	}
}

func TestTargetsAndNumbers(t *testing.T) {
	if c := atLeast("x", 0.79, 0.8, "×"); c.Met || c.Goal != "≥ 0.8" {
		t.Errorf("atLeast below the goal: %+v", c)
	}
	if c := atMost("x", 200, 200, "ms"); !c.Met || c.Goal != "≤ 200" {
		t.Errorf("atMost at the goal must be met: %+v", c)
	}
	if c := reported("x", 0.4, "×"); !c.Met || c.Goal != "reported" {
		t.Errorf("reported: %+v", c)
	}
	for in, want := range map[float64]string{1234.5678: "1235", 0.000123456: "0.0001235", 2: "2", 77.856: "77.86"} {
		if got := num(in); got != want {
			t.Errorf("num(%v) = %q, want %q", in, got, want)
		}
	}
	if g := gibps(3<<30, 2*time.Second); g != 1.5 {
		t.Errorf("gibps = %v, want 1.5", g)
	}
	if g := gibps(1, 0); g != 0 {
		t.Errorf("gibps over no time = %v, want 0", g)
	}
}

func TestPhasesOf(t *testing.T) {
	run := func(ready, load, total time.Duration) serveRun {
		return serveRun{StartToReady: ready, Phases: client.StartPhases{Load: load, Total: total, Plan: time.Millisecond}}
	}
	p := phasesOf([]serveRun{
		run(100*time.Millisecond, 50*time.Millisecond, 80*time.Millisecond),
		run(300*time.Millisecond, 70*time.Millisecond, 200*time.Millisecond),
		run(200*time.Millisecond, 60*time.Millisecond, 150*time.Millisecond),
	})
	if p.Load != 60 || p.Total != 150 || p.Outside != 50 || p.Plan != 1 || p.Export != 0 {
		t.Errorf("phases = %+v, want medians load 60, total 150, outside 50, plan 1 ms", p)
	}
}
