package bench

import (
	"fmt"
	"math"
	"strconv"
)

// Check is one target of the benchmark issue and what was measured for it.
type Check struct {
	Row    string  `json:"row"`
	Metric string  `json:"metric"`
	Target string  `json:"target"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Met    bool    `json:"met"`
	// Why explains a miss (or a caveat of a met target).
	Why string `json:"why,omitempty"`
	// key identifies the kind of check for explain.
	key string
	// Info marks a figure reported next to a target that does not apply
	// to it (Met is then meaningless and true).
	Info bool `json:"info,omitempty"`
}

// reported is an informational Check: a figure with no target of its own.
func reported(row, metric string, value float64, unit string) Check {
	return Check{key: "reported", Row: row, Metric: metric, Target: "reported", Value: sig4(value), Unit: unit, Met: true, Info: true}
}

// atLeast is a Check of kind key that value ≥ target.
func atLeast(key, row, metric string, value, target float64, unit string) Check {
	return Check{key: key, Row: row, Metric: metric, Target: fmt.Sprintf("≥ %s", num(target)), Value: sig4(value),
		Unit: unit, Met: value >= target}
}

// atMost is a Check of kind key that value ≤ target.
func atMost(key, row, metric string, value, target float64, unit string) Check {
	return Check{key: key, Row: row, Metric: metric, Target: fmt.Sprintf("≤ %s", num(target)), Value: sig4(value),
		Unit: unit, Met: value <= target}
}

// num formats a figure with 4 significant digits, without exponent.
func num(x float64) string {
	return strconv.FormatFloat(sig4(x), 'f', -1, 64)
}

// sig4 rounds x to 4 significant digits.
func sig4(x float64) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	f, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 4, 64), 64)
	return f
}
