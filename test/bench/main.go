package bench

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/wcache/wcache/test/benchreport"
)

// The report a run fills and the samples its figures summarize
// (test/benchreport: the JSON schema, targets, summaries and rendering).
type (
	Report  = benchreport.Report
	Summary = benchreport.Summary
	Target  = benchreport.Target
	series  = benchreport.Series
	laps    = benchreport.Laps
)

// DocsTemplate is the text/template docs/benchmarks.md is rendered from
// (`wcache-bench render`). Its prose is written by hand: whoever changes a
// figure's measurement keeps the note on what limits it current.
//
//go:embed benchmarks.md.tmpl
var DocsTemplate string

// Main runs the wcache-bench command line with args (without the program
// name) and returns its exit status: 0 on success (missed targets
// included: they are results), 1 when a scenario or the rendering failed,
// 2 for bad usage. `wcache-bench render …` renders a report into Markdown;
// `wcache-bench helper …` runs a fresh-process helper.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 {
		switch args[0] {
		case HelperCommand:
			if err := RunHelper(ctx, args[1:], stdout); err != nil {
				fmt.Fprintf(stderr, "wcache-bench helper: %v\n", err)
				return 1
			}
			return 0
		case "render":
			return benchreport.Main(args[1:], DocsTemplate, stdout, stderr)
		}
	}
	o, err := ParseOptions(args, nil)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, Usage())
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "%v\n\n%s", err, Usage())
		return 2
	}
	o.Log = stderr
	r, err := Run(ctx, o)
	if err == nil {
		err = r.WriteJSON(filepath.Join(o.OutDir, "benchmarks.json"))
	}
	if err != nil {
		fmt.Fprintf(stderr, "wcache-bench: %v\n", err)
		return 1
	}
	missed := len(slices.DeleteFunc(slices.Clone(r.Targets), func(t Target) bool { return t.Met }))
	fmt.Fprintf(stdout, "wcache-bench: wrote %s (%d figures against targets, %d missed) in %.0f s\n",
		filepath.Join(o.OutDir, "benchmarks.json"), len(r.Targets), missed, r.Seconds)
	return 0
}
