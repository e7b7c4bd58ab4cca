package bench

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/template"
)

// DocsTemplate is the text/template docs/benchmarks.md is rendered from.
// Its prose is written by hand: whoever changes a figure's measurement
// keeps the note on what limits it current.
//
//go:embed benchmarks.md.tmpl
var DocsTemplate string

// Render fills the template text with a JSON report. The template sees the
// report as decoded JSON (objects are maps keyed by the JSON names), so
// it renders any report of this schema, including one without some
// scenario: a missing figure prints "—". A report of another schema is an
// error.
func Render(text string, report []byte) ([]byte, error) {
	var data map[string]any
	if err := json.Unmarshal(report, &data); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	if s, _ := data["schema"].(float64); int(s) != ReportSchema {
		return nil, fmt.Errorf("report of schema %v, this renderer reads %d", data["schema"], ReportSchema)
	}
	t, err := template.New("benchmarks").Funcs(renderFuncs()).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("docs template: %w", err)
	}
	var out bytes.Buffer
	if err := t.Execute(&out, data); err != nil {
		return nil, fmt.Errorf("docs template: %w", err)
	}
	return out.Bytes(), nil
}

// missing is what a figure absent from the report renders as.
const missing = "—"

// renderFuncs are the template's formatting helpers. Each takes a JSON
// value (float64, or nil when absent) and renders nil as missing.
func renderFuncs() template.FuncMap {
	number := func(x any) (float64, bool) { f, ok := x.(float64); return f, ok }
	return template.FuncMap{
		// n formats a number with digits decimals.
		"n": func(digits int, x any) string {
			f, ok := number(x)
			if !ok {
				return missing
			}
			return strconv.FormatFloat(f, 'f', digits, 64)
		},
		// v is a number as measured (already rounded), without exponent.
		"v": func(x any) string {
			f, ok := number(x)
			if !ok {
				return missing
			}
			return strconv.FormatFloat(f, 'f', -1, 64)
		},
		// size formats bytes in MiB below 1 GiB, else in GiB.
		"size": func(x any) string {
			f, ok := number(x)
			switch {
			case !ok:
				return missing
			case f < 1<<30:
				return strconv.FormatFloat(f/(1<<20), 'f', 1, 64) + " MiB"
			default:
				return strconv.FormatFloat(f/(1<<30), 'f', 2, 64) + " GiB"
			}
		},
		// met renders a target's outcome.
		"met": func(t map[string]any) string {
			switch {
			case t["goal"] == "reported":
				return missing
			case t["met"] == true:
				return "yes"
			default:
				return "**no**"
			}
		},
		// s is a string, or missing when absent or empty.
		"s": func(x any) string {
			if s, _ := x.(string); s != "" {
				return s
			}
			return missing
		},
		// short is the first 12 characters of a commit hash.
		"short": func(x any) string {
			s, _ := x.(string)
			return s[:min(len(s), 12)]
		},
		"join": func(sep string, x any) string {
			list, _ := x.([]any)
			var parts []string
			for _, v := range list {
				parts = append(parts, fmt.Sprint(v))
			}
			return strings.Join(parts, sep)
		},
	}
}
