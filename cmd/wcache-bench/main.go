// Command wcache-bench runs the wcache benchmarks (make bench) and writes
// docs/benchmarks.md and docs/benchmarks.json. See internal/bench.
package main

import (
	"os"

	"github.com/wcache/wcache/internal/bench"
)

func main() {
	os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr))
}
