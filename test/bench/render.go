package bench

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
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

// renderFuncs are the template's formatting helpers. Each takes a JSON
// value and renders one absent from the report (nil) as "—".
func renderFuncs() template.FuncMap {
	return template.FuncMap{
		// n formats a number with digits decimals (-1: as many as needed).
		"n": func(digits int, x any) string {
			if f, ok := x.(float64); ok {
				return strconv.FormatFloat(f, 'f', digits, 64)
			}
			return "—"
		},
		// size formats bytes in MiB below 1 GiB, else in GiB.
		"size": func(x any) string {
			f, ok := x.(float64)
			switch {
			case !ok:
				return "—"
			case f < 1<<30:
				return strconv.FormatFloat(f/(1<<20), 'f', 1, 64) + " MiB"
			default:
				return strconv.FormatFloat(f/(1<<30), 'f', 2, 64) + " GiB"
			}
		},
		// s is a string, "—" when absent or empty.
		"s": func(x any) string {
			if s, _ := x.(string); s != "" {
				return s
			}
			return "—"
		},
	}
}
