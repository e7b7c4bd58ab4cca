// Package benchreport is the report of a benchmark run (make bench): its
// JSON schema, the machine and commit it ran on, the targets and summaries
// of its figures, and its rendering into docs/benchmarks.md with the
// hand-written template test/bench/benchmarks.md.tmpl (`wcache-bench
// render`, make bench-docs). test/bench measures and fills it.
package benchreport

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/template"
)

// Schema is the version of the report's JSON layout that Render reads: 4
// keeps every scenario's figures under results.<scenario>, their times,
// rates and ratios by name in the shape of Figures, and the targets in one
// list.
const Schema = 4

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
	if s, _ := data["schema"].(float64); int(s) != Schema {
		return nil, fmt.Errorf("report of schema %v, this renderer reads %d", data["schema"], Schema)
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

// Main is `wcache-bench render -in JSON -out MD [-template FILE]`: it fills
// the template (builtin unless -template) from a report and returns the
// exit status (1 on an error, 2 for bad usage).
func Main(args []string, builtin string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("wcache-bench render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "bench-results/benchmarks.json", "report written by a run")
	out := fs.String("out", "docs/benchmarks.md", "Markdown to write")
	tmpl := fs.String("template", "", "text/template to fill (default: the one built in, test/bench/benchmarks.md.tmpl)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	text, err := []byte(builtin), error(nil)
	if *tmpl != "" {
		text, err = os.ReadFile(*tmpl)
	}
	var report, md []byte
	if err == nil {
		report, err = os.ReadFile(*in)
	}
	if err == nil {
		md, err = Render(string(text), report)
	}
	if err == nil {
		err = os.WriteFile(*out, md, 0o644)
	}
	if err != nil {
		fmt.Fprintf(stderr, "wcache-bench render: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wcache-bench: wrote %s from %s\n", *out, *in)
	return 0
}
