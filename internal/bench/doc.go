// Package bench is the wcache benchmark harness behind `make bench`
// (cmd/wcache-bench). It runs the real binaries — bin/wcache serve with
// the mock backend plugin, in real processes talking over real Unix
// sockets — each scenario in its own private temporary world (runtime
// directory, shared-memory directory, device UUID), and writes every figure
// with the machine and the commit to one JSON report (Report) in a results
// folder. It writes nothing else: Render fills the docs template
// (benchmarks.md.tmpl, hand-written prose) from a report, for
// `make bench-docs`.
//
// Each scenario is one file with a Run function listed in Scenarios:
// restart (a fresh process reads the files versus attaches, Go and
// Python), attach (latency against manifest size and checkpoint bytes),
// fill (the daemon's fill rate against a sequential read, a memcpy and
// fills of fresh shared memory without wcache, page cache warm and cold),
// concurrency (many clients attaching and releasing), startup (start to
// ready, the daemon's own start-up phases, and the memory beyond the
// weights) and micro (the hot paths' Go benchmarks). Phase timings come
// from the daemon's Status (start_phases), never from its log.
//
// Times are medians over repeated runs (p99 where asked) and every
// comparison is a ratio of figures measured in the same run, interleaved.
// Fresh processes (child.go, the one file that starts processes) are this
// binary re-executed with the hidden "helper" subcommand, /usr/bin/python3
// running an embedded script, or `wcache serve`.
package bench
