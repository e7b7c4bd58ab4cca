// Package testproc runs wcache's own binaries as child processes for the
// end-to-end tests (test/e2e) and the benchmarks (test/bench): start
// `wcache serve`, `wcache launch` or any command in a process group of its
// own, collect what it writes, wait for a line of output or for a daemon's
// ready file, and stop it — SIGTERM, a grace period, then SIGKILL to the
// whole group so that orphaned backend plugins go too.
//
// The rest of what the e2e tests and the benchmarks both do with wcache
// lives here too, once: the `wcache serve` command line and its ready
// wait (ServeArgs, World.Serve), a daemon's Status and plugin
// (World.Status, PluginPID), generated checkpoints of a size and tensor
// count (GenerateModel) and the config an engine sends for them
// (EngineConfig), building the binaries (BuildBinaries, InstallBinaries,
// over internal/childproc.GoBuild), and the measurements of child processes the
// benchmarks take (ReadMemory, ReadFaults, Sampler, World.ShmAllocated).
// Tests outside test/ never import it (the layering test): what they
// share with it lives in internal/childproc and core/client/clienttest.
//
// It takes no *testing.T: every wait returns an error that carries the
// process's output, and the caller decides whether that fails a test or a
// benchmark. A Group remembers what it started and stops it all at once
// (from t.Cleanup, or when a benchmark ends).
//
// The shipped wcache binary does not link this package (wcache demo starts
// its launcher through core/launcher).
package testproc
