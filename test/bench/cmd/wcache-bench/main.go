// Command wcache-bench runs the wcache benchmarks (make bench) and writes
// their figures as JSON into a results folder; `wcache-bench render` fills
// docs/benchmarks.md from such a report (make bench-docs). See test/bench.
package main

import (
	"os"

	"github.com/wcache/wcache/test/bench"
)

func main() {
	os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr))
}
