package bench

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

func TestMedianFloatAndRatio(t *testing.T) {
	if got := MedianFloat([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("MedianFloat = %v, want 2.5", got)
	}
	if got := MedianFloat(nil); got != 0 {
		t.Errorf("MedianFloat(nil) = %v", got)
	}
	if got := ratio(3, 0); got != 0 {
		t.Errorf("ratio(3, 0) = %v, want 0 rather than infinity", got)
	}
	if got := ratio(3, 2); got != 1.5 {
		t.Errorf("ratio(3, 2) = %v", got)
	}
}

func TestChecksAndNumbers(t *testing.T) {
	if c := atLeast(keyFillWarm, "3 fill", "x", 0.79, 0.8, "×"); c.Met || c.Target != "≥ 0.8" {
		t.Errorf("atLeast below target: %+v", c)
	}
	if c := atMost(keyStartup, "6", "x", 200, 200, "ms"); !c.Met {
		t.Errorf("atMost at the target must be met: %+v", c)
	}
	if c := reported("1", "x", 0.4, "×"); !c.Info || !c.Met {
		t.Errorf("reported: %+v", c)
	}
	for in, want := range map[float64]string{1234.5678: "1235", 0.000123456: "0.0001235", 2: "2", 77.856: "77.86"} {
		if got := num(in); got != want {
			t.Errorf("num(%v) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[uint64]string{512: "512 B", 1536: "1.5 KiB", 4 << 30: "4.0 GiB"} {
		if got := human(in); got != want {
			t.Errorf("human(%d) = %q, want %q", in, got, want)
		}
	}
}
