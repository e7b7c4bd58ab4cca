package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

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
			return renderMain(args[1:], stdout, stderr)
		}
	}
	o, err := ParseOptions(args, nil)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "%v\n\n%s\n", err, usage)
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
	missed := 0
	for _, t := range r.Targets {
		if !t.Met {
			missed++
		}
	}
	fmt.Fprintf(stdout, "wcache-bench: wrote %s (%d figures against targets, %d missed) in %.0f s\n",
		filepath.Join(o.OutDir, "benchmarks.json"), len(r.Targets), missed, r.Seconds)
	return 0
}

// renderMain is `wcache-bench render -in JSON -out MD [-template FILE]`.
func renderMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("wcache-bench render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "bench-results/benchmarks.json", "report written by a run")
	out := fs.String("out", "docs/benchmarks.md", "Markdown to write")
	tmpl := fs.String("template", "", "text/template to fill (default: the one built in, test/bench/benchmarks.md.tmpl)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	text, err := []byte(DocsTemplate), error(nil)
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

// usage is the help text.
const usage = `usage: wcache-bench [flags]
       wcache-bench render [-in JSON] [-out MD] [-template FILE]

Runs the wcache benchmarks against the binaries in -bin (make build) and
writes OUT/benchmarks.json; it modifies nothing else. render fills the docs
template (test/bench/benchmarks.md.tmpl) from such a report. Flags
(environment in brackets):

  -bin DIR            wcache, wcache-backend-mock and (for pipeline) wcache-backend-cuda (default bin)
  -repo DIR           source tree: git commit, clients/python/src, micro-benchmarks (default .)
  -out DIR            results folder [WCACHE_BENCH_OUT] (default bench-results)
  -gib N              large checkpoint, GiB [WCACHE_BENCH_GIB] (default 4)
  -small-mib N        small checkpoint, MiB [WCACHE_BENCH_SMALL_MIB] (default 256)
  -few-tensors N      small manifest (default 300)
  -many-tensors N     large manifest (default 3000)
  -repeats N          fresh processes / serve runs per variant [WCACHE_BENCH_REPEATS] (default 5)
  -attach-iters N     timed attaches per manifest [WCACHE_BENCH_ATTACH_ITERS] (default 300)
  -clients N          concurrent clients [WCACHE_BENCH_CLIENTS] (default 64)
  -seconds S          concurrency run length [WCACHE_BENCH_SECONDS] (default 10)
  -tmpdir DIR         where checkpoints are generated, a disk [WCACHE_BENCH_TMPDIR]
  -shmdir DIR         parent of the mock's shared-memory folders (default /dev/shm)
  -python PATH        interpreter with numpy and torch [WCACHE_BENCH_PYTHON] (default /usr/bin/python3)
  -only LIST          scenarios: restart,fill,publish,pipeline,attach,concurrency,startup,micro [WCACHE_BENCH_ONLY]
  -cold=false         skip the page-cache-cold fill (needs root to drop caches)
  -benchtime D        -benchtime of the micro-benchmarks (default 1s)
  -keep               keep the generated checkpoints`
