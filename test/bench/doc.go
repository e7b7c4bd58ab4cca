// Package bench is the wcache benchmark harness behind `make bench`
// (test/bench/cmd/wcache-bench). It runs the real binaries — bin/wcache serve with
// the mock backend plugin (the CUDA plugin on its fake driver for the fill
// pipeline), in real processes over real Unix sockets — each scenario in a
// private world (world.go: runtime and shared-memory directories, device
// UUID), and writes every figure with the machine and the commit to one
// JSON Report in a results folder. It writes nothing else: Render fills the
// docs template (benchmarks.md.tmpl, hand-written prose) from a report, for
// `make bench-docs`.
//
// Each scenario is one file with a Run function listed in Scenarios. Phase
// timings come from the daemon's Status (start_phases), never from its log.
// Times are medians over repeated runs (p99 where asked), and every
// comparison is a ratio of figures measured in the same run, interleaved.
// Fresh processes (helper.go) are this binary re-executed with the hidden
// "helper" subcommand or /usr/bin/python3 running an embedded script.
package bench
