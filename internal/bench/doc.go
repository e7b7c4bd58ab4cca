// Package bench is the wcache benchmark harness behind `make bench`
// (cmd/wcache-bench). It runs the real binaries — bin/wcache serve with
// the mock backend plugin, in real processes talking over real Unix
// sockets — each scenario in its own private temporary world (runtime
// directory, shared-memory directory, device UUID), and writes every figure
// with the machine and the commit to docs/benchmarks.md and
// docs/benchmarks.json.
//
// Scenarios (see docs/benchmarks.md for what each measures and why):
//
//  1. restart: a fresh process makes every tensor of a generated checkpoint
//     usable, reading the safetensors files versus attaching to the daemon
//     (Go and Python, in-process time and whole-process wall time);
//  2. attach: attach latency p50/p99 against manifest size and checkpoint
//     bytes, with a Status round trip on the same socket as the floor;
//  3. fill: the daemon's own load rate against a sequential read and a
//     memcpy of the same bytes, page-cache warm and cold, with the mock's
//     fill pattern and fills of fresh shared memory measured without
//     wcache in the same run to locate the cost;
//  4. concurrency: many clients attaching and releasing in a loop;
//  5. footprint: daemon and plugin memory beyond the cached weights;
//  6. startup: serve start to ready, minus the load;
//  7. gpu: not measured here (scripts/gpu-check.sh fills it on a GPU).
//
// Times are medians over repeated runs (p99 where asked) and every
// comparison is a ratio of figures measured in the same run. Fresh
// processes are this binary re-executed with the hidden "helper"
// subcommand, or /usr/bin/python3 running an embedded script.
package bench
