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

// Figures is the shape of figures taken in the same rounds: Times,
// intervals summarized by name (ms); Rates, by name, the median of
// Samples (GiB/s, a sample a round); Ratios, named by their scenario, each
// the quotient of two of those medians (Ratio).
type Figures struct {
	Times   map[string]Summary `json:"times,omitempty"`
	Rates   map[string]float64 `json:"gib_per_s,omitempty"`
	Ratios  map[string]float64 `json:"ratios,omitempty"`
	Samples Series             `json:"samples_gib_per_s,omitempty"`
}

// FiguresOf summarizes every interval of l and every sample of s (either
// may be nil).
func FiguresOf(l Laps, s Series) Figures {
	f := Figures{Times: map[string]Summary{}, Rates: map[string]float64{}, Ratios: map[string]float64{}, Samples: s}
	for k := range l {
		f.Times[k] = l.Summary(k)
	}
	for k := range s {
		f.Rates[k] = s.Med(k)
	}
	return f
}

// Ratio records as Ratios[name], and returns, the median of num over that
// of den, rounded (0 when den's is 0): their rates when num is a rate,
// else their times.
func (f Figures) Ratio(name, num, den string) float64 {
	n, rate := f.Rates[num]
	d := f.Rates[den]
	if !rate {
		n, d = f.Times[num].MedianMS, f.Times[den].MedianMS
	}
	f.Ratios[name] = Round3(Ratio(n, d))
	return f.Ratios[name]
}
