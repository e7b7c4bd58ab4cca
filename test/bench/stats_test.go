package bench

import (
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/test/benchreport"
)

func TestMedianAndRatio(t *testing.T) {
	if got := benchreport.Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median = %v, want 2.5", got)
	}
	if got := benchreport.Median[float64](nil); got != 0 {
		t.Errorf("benchreport.Median[float64](nil) = %v", got)
	}
	if got := benchreport.Ratio(3, 0); got != 0 {
		t.Errorf("benchreport.Ratio(3, 0) = %v, want 0 rather than infinity", got)
	}
	if got := benchreport.Ratio(3, 2); got != 1.5 {
		t.Errorf("benchreport.Ratio(3, 2) = %v", got)
	}
}

func TestGiBps(t *testing.T) {
	if g := benchreport.GiBps(3<<30, 2*time.Second); g != 1.5 {
		t.Errorf("gibps = %v, want 1.5", g)
	}
	if g := benchreport.GiBps(1, 0); g != 0 {
		t.Errorf("gibps over no time = %v, want 0", g)
	}
}

func TestServeLaps(t *testing.T) {
	run := func(ready, load, total time.Duration) serveRun {
		return serveRun{StartToReady: ready, Phases: client.StartPhases{Load: load, Total: total, Plan: time.Millisecond}}
	}
	l := serveLaps([]serveRun{
		run(100*time.Millisecond, 50*time.Millisecond, 80*time.Millisecond),
		run(300*time.Millisecond, 70*time.Millisecond, 200*time.Millisecond),
		run(200*time.Millisecond, 60*time.Millisecond, 150*time.Millisecond),
	})
	p := l.MediansMS()
	if p["load"] != 60 || p["daemon_total"] != 150 || p["outside_daemon"] != 50 || p["plan"] != 1 || p["export"] != 0 {
		t.Errorf("phases = %+v, want medians load 60, total 150, outside 50, plan 1 ms", p)
	}
}
