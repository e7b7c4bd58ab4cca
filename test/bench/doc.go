// Package bench is the wcache benchmark harness behind `make bench`
// (test/bench/cmd/wcache-bench). It runs the real binaries — bin/wcache
// serve with the mock backend plugin (the CUDA plugin on its fake driver
// for the fill pipeline), in real processes over real Unix sockets — each
// scenario in a private world (world.go), and writes every figure to one
// JSON report (test/benchreport, which also renders the docs from it).
//
// Each scenario is one file with a Run function listed in Scenarios, on a
// common runner (runner.go). Phase timings come from the daemon's Status,
// never from its log. Times are medians over repeated runs (p99 where
// asked); every ratio compares figures of the same run, interleaved. Fresh
// processes (helper.go) are this binary re-executed as `helper` or Python
// running an embedded script.
package bench
