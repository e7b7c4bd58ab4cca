package benchreport

import (
	"math"
	"slices"
	"time"
)

// Series are samples by name (rates in GiB/s, say), rounded for the report.
type Series map[string][]float64

// Add appends v, rounded, to key's samples.
func (s Series) Add(key string, v float64) { s[key] = append(s[key], Round3(v)) }

// Med is the median of key's samples.
func (s Series) Med(key string) float64 { return Round3(Median(s[key])) }

// Last is key's latest sample (0 when none).
func (s Series) Last(key string) float64 {
	if v := s[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return 0
}

// Ratio is a/b, or 0 when b is 0 (a ratio that cannot be formed is shown
// as such by the report, never as infinity).
func Ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Round3 rounds x to three decimals for the JSON report.
func Round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// GiBps is bytes per second in GiB/s (0 for no time).
func GiBps(bytes uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / float64(1<<30) / d.Seconds()
}

// Laps are timed intervals by name.
type Laps map[string][]time.Duration

// Start begins a Stopwatch over consecutive intervals (kept only when keep).
func (l Laps) Start(keep bool) *Stopwatch { return &Stopwatch{l: l, keep: keep, last: time.Now()} }

// Summary summarizes key's intervals.
func (l Laps) Summary(key string) Summary { return Summarize(l[key]) }

// MediansMS are the medians (ms) of every interval but those of skip.
func (l Laps) MediansMS(skip ...string) map[string]float64 {
	out := map[string]float64{}
	for k := range l {
		if !slices.Contains(skip, k) {
			out[k] = Round3(l.Summary(k).MedianMS)
		}
	}
	return out
}

// A Stopwatch records the intervals between its laps into Laps.
type Stopwatch struct {
	l    Laps
	keep bool
	last time.Time
}

// Lap ends the interval named key and starts the next one.
func (s *Stopwatch) Lap(key string) {
	now := time.Now()
	if s.keep {
		s.l[key] = append(s.l[key], now.Sub(s.last))
	}
	s.last = now
}

// MedRatio is the medians of num's and den's samples and their ratio
// (num ÷ den, rounded; 0 when den's median is 0).
func (s Series) MedRatio(num, den string) (n, d, ratio float64) {
	n, d = s.Med(num), s.Med(den)
	return n, d, Round3(Ratio(n, d))
}
