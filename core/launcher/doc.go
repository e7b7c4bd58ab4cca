// Package launcher starts one wcache daemon per local GPU of a TP x PP
// layout, placed exactly as an engine places its ranks, waits until every
// daemon is ready, and supervises them until it is stopped.
//
// Placement (Place) is pure arithmetic over a Topology. Launch resolves each
// GPU's UUID through a backend, derives the discovery paths, cleans stale
// files for every GPU, spawns the daemons (a Starter, by default ExecStarter
// running `wcache serve`), and waits for their ready files. If any daemon
// exits early or the ready timeout passes, it terminates all the others
// before it returns the failure. Group.Supervise then keeps watch: when one
// daemon dies while serving, the others are stopped and Supervise fails.
//
// See docs/launcher.md for the placement formula with worked examples and
// the failure policy.
package launcher
