package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Main runs the wcache-bench command line with args (without the program
// name) and returns its exit status: 0 on success (targets missed included:
// they are findings in the report), 1 when a scenario failed, 2 for bad
// usage. `wcache-bench helper …` runs a fresh-process helper instead.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 && args[0] == HelperCommand {
		if err := RunHelper(ctx, args[1:], stdout); err != nil {
			fmt.Fprintf(stderr, "wcache-bench helper: %v\n", err)
			return 1
		}
		return 0
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
	if o.RenderOnly {
		r, err := ReadReport(o.OutJSON)
		if err == nil {
			err = r.WriteMarkdown(o.OutMarkdown)
		}
		if err != nil {
			fmt.Fprintf(stderr, "wcache-bench: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "wcache-bench: wrote %s from %s\n", o.OutMarkdown, o.OutJSON)
		return 0
	}
	r, err := Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "wcache-bench: %v\n", err)
		return 1
	}
	if err := r.WriteJSON(o.OutJSON); err != nil {
		fmt.Fprintf(stderr, "wcache-bench: %v\n", err)
		return 1
	}
	if err := r.WriteMarkdown(o.OutMarkdown); err != nil {
		fmt.Fprintf(stderr, "wcache-bench: %v\n", err)
		return 1
	}
	missed := 0
	for _, c := range r.Checks {
		if !c.Met {
			missed++
		}
	}
	fmt.Fprintf(stdout, "wcache-bench: wrote %s and %s (%d targets, %d missed) in %.0f s\n",
		o.OutMarkdown, o.OutJSON, len(r.Checks), missed, r.Seconds)
	return 0
}

// usage is the help text.
const usage = `usage: wcache-bench [flags]

Runs the wcache benchmarks against the binaries in -bin (make build) and
writes docs/benchmarks.md and docs/benchmarks.json. Flags (environment in
brackets):

  -bin DIR            wcache and wcache-backend-mock (default bin)
  -repo DIR           source tree: git commit, clients/python/src (default .)
  -out-md, -out-json  reports (default docs/benchmarks.md, docs/benchmarks.json)
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
  -only LIST          scenarios: restart,attach,fill,concurrency,startup [WCACHE_BENCH_ONLY]
  -cold=false         skip the page-cache-cold fill (needs root to drop caches)
  -profile=false      skip CPU profiles of missed targets
  -keep               keep the generated checkpoints
  -render-only        rewrite -out-md from -out-json, running nothing`
