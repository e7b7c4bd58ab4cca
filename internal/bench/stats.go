package bench

import (
	"math"
	"slices"
	"time"
)

// Summary describes a sample of durations in milliseconds.
type Summary struct {
	N        int     `json:"n"`
	MedianMS float64 `json:"median_ms"`
	P99MS    float64 `json:"p99_ms"`
	MinMS    float64 `json:"min_ms"`
	MaxMS    float64 `json:"max_ms"`
}

// Summarize computes the median, the 99th percentile (nearest rank: the
// smallest value with at least 99% of the sample at or below it) and the
// extremes of ds. An empty sample is the zero Summary.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := min(max(int(math.Ceil(0.99*float64(len(s)))), 1), len(s))
	return Summary{N: len(s), MedianMS: ms(median(s)), P99MS: ms(s[rank-1]), MinMS: ms(s[0]), MaxMS: ms(s[len(s)-1])}
}

// median of a sample: the middle value, or the mean of the two middle
// values (0 when empty).
func median[T time.Duration | float64](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	switch n := len(s); {
	case n == 0:
		return 0
	case n%2 == 1:
		return s[n/2]
	default:
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// series are samples by name (rates in GiB/s, say), rounded for the report.
type series map[string][]float64

func (s series) add(key string, v float64) { s[key] = append(s[key], round3(v)) }

// med is the median of key's samples.
func (s series) med(key string) float64 { return round3(median(s[key])) }

// last is key's latest sample (0 when none).
func (s series) last(key string) float64 {
	if v := s[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return 0
}

// ms converts d to float milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ratio is a/b, or 0 when b is 0 (a ratio that cannot be formed is shown
// as such by the report, never as infinity).
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// round3 rounds x to three decimals for the JSON report.
func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// gibps is bytes per second in GiB/s (0 for no time).
func gibps(bytes uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / float64(1<<30) / d.Seconds()
}

// PhasesMS are the medians, in milliseconds, of the start-up phases the
// daemons reported (client.StartPhases) over serve runs, and of the part
// of start-to-ready outside the daemon's own start-up: process and
// backend plugin start, and the ready file.
type PhasesMS struct {
	Plan     float64 `json:"plan_ms"`
	Lock     float64 `json:"lock_ms"`
	Allocate float64 `json:"allocate_ms"`
	Load     float64 `json:"load_ms"`
	Export   float64 `json:"export_ms"`
	Total    float64 `json:"daemon_total_ms"`
	Outside  float64 `json:"outside_daemon_ms"`
}

// phasesOf summarises the phases of serve runs.
func phasesOf(runs []serveRun) PhasesMS {
	var plan, lock, alloc, load, export, total, outside []time.Duration
	for _, r := range runs {
		p := r.Phases
		plan, lock, alloc = append(plan, p.Plan), append(lock, p.Lock), append(alloc, p.Allocate)
		load, export, total = append(load, p.Load), append(export, p.Export), append(total, p.Total)
		outside = append(outside, r.StartToReady-p.Total)
	}
	med := func(ds []time.Duration) float64 { return round3(Summarize(ds).MedianMS) }
	return PhasesMS{Plan: med(plan), Lock: med(lock), Allocate: med(alloc), Load: med(load), Export: med(export),
		Total: med(total), Outside: med(outside)}
}
