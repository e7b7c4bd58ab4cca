package benchreport

import "testing"

func TestCompareBandAndMark(t *testing.T) {
	// New: median 12, quartiles 11 and 13 (relative IQR 2/12); baseline:
	// median 10, quartiles 9.5 and 10.5 (1/10). Band: 1/12, ratio 1.2.
	c := Compare("attach", "ms", false, []float64{10, 11, 12, 13, 14}, []float64{9, 9.5, 10, 10.5, 11})
	if c.New != 12 || c.Base != 10 || c.Ratio != 1.2 || c.Band != 0.083 || !c.Worse {
		t.Fatalf("slower time: %+v", c)
	}
	if tg := c.Target(); tg.Met || tg.Goal != "≤ 1.083" || tg.Value != 1.2 {
		t.Errorf("target of a marked time: %+v", tg)
	}
	// Within the band on the bad side: not marked.
	if c := Compare("attach", "ms", false, []float64{10, 10.5, 10.8, 11.5, 12}, []float64{8, 9, 10, 11, 12}); c.Worse || c.Ratio != 1.08 || c.Band != 0.1 {
		t.Errorf("slower time within the band: %+v", c)
	}
	// A rate: lower is worse.
	r := Compare("fill", "GiB/s", true, []float64{1, 1, 1}, []float64{2, 2, 2})
	if !r.Worse || r.Ratio != 0.5 || r.Band != 0 {
		t.Errorf("slower rate: %+v", r)
	}
	if tg := r.Target(); tg.Met || tg.Goal != "≥ 1" {
		t.Errorf("target of a slower rate: %+v", tg)
	}
	if f := Compare("fill", "GiB/s", true, []float64{3}, []float64{2}); f.Worse || f.Ratio != 1.5 {
		t.Errorf("faster rate: %+v", f)
	}
}
