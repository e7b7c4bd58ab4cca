package benchreport

import (
	"os"
	"strings"
	"testing"
)

func TestRenderMarksMissingFigures(t *testing.T) {
	md, err := Render(docsTemplate(t), []byte(`{"schema": 4, "generated": "2026-01-01T00:00:00Z", "seconds": 1,
		"commit": {"hash": "0123456789abcdef"}, "results": {}, "targets": [
		{"scenario": "fill", "metric": "m", "goal": "≥ 0.8", "value": 0.5, "unit": "×", "met": false},
		{"scenario": "fill", "metric": "r", "goal": "reported", "value": 2, "unit": "×", "met": true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := string(md)
	for _, want := range []string{"| fill | m | ≥ 0.8 × | 0.5 × | **no** |", "| fill | r | reported | 2 × | — |",
		"`0123456789ab`"} {
		if !strings.Contains(s, want) {
			t.Errorf("rendered docs lack %q:\n%s", want, s)
		}
	}
	// Every scenario's section has the marker in the template; with no
	// results, each one must show it.
	tmpl := docsTemplate(t)
	if want, n := strings.Count(tmpl, "Not measured in this version"), strings.Count(s, "Not measured in this version"); n != want || want == 0 {
		t.Errorf("%d scenarios marked not measured, want %d (the template's sections)", n, want)
	}
	if strings.Contains(s, "<no value>") {
		t.Errorf("a missing figure rendered as <no value>:\n%s", s)
	}
}

func TestRenderRefusesOtherSchemas(t *testing.T) {
	for _, in := range []string{`{"schema": 2}`, `{}`, `not json`} {
		if _, err := Render(docsTemplate(t), []byte(in)); err == nil {
			t.Errorf("Render(%s) succeeded", in)
		}
	}
	if _, err := Render("{{.x", []byte(`{"schema": 4}`)); err == nil {
		t.Error("a broken template rendered")
	}
}

// The committed docs/benchmarks.md is the template filled from the
// committed docs/benchmarks.json: a template change must be rendered
// (make bench-docs) in the same commit.
func TestCommittedDocsAreRenderedFromTheCommittedReport(t *testing.T) {
	report, err := os.ReadFile("../../docs/benchmarks.json")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Render(docsTemplate(t), report)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Error("docs/benchmarks.md is not the template filled from docs/benchmarks.json: run make bench-docs")
	}
}

// docsTemplate is the template the bench embeds.
func docsTemplate(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../bench/benchmarks.md.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
