package benchreport

import (
	"testing"
	"time"
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

func TestTargetsAndNumbers(t *testing.T) {
	if c := AtLeast("x", 0.79, 0.8, "×"); c.Met || c.Goal != "≥ 0.8" {
		t.Errorf("atLeast below the goal: %+v", c)
	}
	if c := AtMost("x", 200, 200, "ms"); !c.Met || c.Goal != "≤ 200" {
		t.Errorf("atMost at the goal must be met: %+v", c)
	}
	if c := Reported("x", 0.4, "×"); !c.Met || c.Goal != "reported" {
		t.Errorf("reported: %+v", c)
	}
	for in, want := range map[float64]string{1234.5678: "1235", 0.000123456: "0.0001235", 2: "2", 77.856: "77.86"} {
		if got := num(in); got != want {
			t.Errorf("num(%v) = %q, want %q", in, got, want)
		}
	}
}
