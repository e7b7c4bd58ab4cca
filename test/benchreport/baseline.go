package benchreport

import (
	"fmt"
	"math"
	"slices"
)

// Comparison is one figure of the build under test (New) beside the same
// figure of a baseline build (Base), both medians of samples taken in the
// same rounds, interleaved; Ratio is New ÷ Base. Higher says whether a
// larger figure is better (a rate) or worse (a time).
//
// Band is the noise band: half the larger of the two builds' relative
// interquartile ranges ((Q3 − Q1) ÷ median of the repeated runs of this
// run). Worse marks a ratio outside it on the bad side: a time above
// 1 + Band, a rate below 1 − Band. A figure sampled once has no spread
// (Band 0): any difference then counts.
type Comparison struct {
	Metric      string    `json:"metric"`
	Unit        string    `json:"unit"`
	Higher      bool      `json:"higher_is_better,omitempty"`
	New         float64   `json:"new"`
	Base        float64   `json:"baseline"`
	Ratio       float64   `json:"ratio"`
	Band        float64   `json:"noise_band"`
	Worse       bool      `json:"worse"`
	NewSamples  []float64 `json:"new_samples"`
	BaseSamples []float64 `json:"baseline_samples"`
}

// Compare summarizes the samples of both builds of one figure.
func Compare(metric, unit string, higher bool, newSamples, baseSamples []float64) Comparison {
	c := Comparison{Metric: metric, Unit: unit, Higher: higher, New: sig4(Median(newSamples)), Base: sig4(Median(baseSamples)),
		NewSamples: newSamples, BaseSamples: baseSamples}
	c.Ratio = Round3(Ratio(Median(newSamples), Median(baseSamples)))
	c.Band = Round3(max(relativeIQR(newSamples), relativeIQR(baseSamples)) / 2)
	c.Worse = c.Ratio > 1+c.Band
	if higher {
		c.Worse = c.Ratio < 1-c.Band
	}
	return c
}

// Target is the comparison as a target of the report: the ratio within
// the noise band on the bad side (Met is !Worse).
func (c Comparison) Target() Target {
	metric := fmt.Sprintf("new ÷ baseline: %s (noise band ±%s)", c.Metric, num(c.Band))
	if c.Higher {
		return AtLeast(metric, c.Ratio, 1-c.Band, "×")
	}
	return AtMost(metric, c.Ratio, 1+c.Band, "×")
}

// relativeIQR is (Q3 − Q1) ÷ median of xs (quartiles interpolated between
// ranks), 0 for fewer than two samples or a zero median.
func relativeIQR(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	q := func(p float64) float64 {
		at := p * float64(len(s)-1)
		lo := int(math.Floor(at))
		if lo+1 >= len(s) {
			return s[lo]
		}
		return s[lo] + (at-float64(lo))*(s[lo+1]-s[lo])
	}
	return Ratio(q(0.75)-q(0.25), q(0.5))
}
