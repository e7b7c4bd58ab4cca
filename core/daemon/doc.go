// Package daemon is one GPU's wcache daemon as a library; `wcache serve` is
// a thin command around it.
//
// Start resolves the device's UUID through the backend plugin (and validates
// it before it names any file), opens and plans the checkpoint, takes the
// device's identity lock (cleaning stale files, or taking over a live daemon
// with Force), allocates a few large arenas, has the plugin load them from
// the files and export one handle per arena, builds the manifest once,
// listens on the device's Unix socket (bound in a private directory,
// mode 0600) and only then writes the ready file. Run serves the daemon.v1
// gRPC protocol to many clients at once until it is stopped:
//
//   - Attach compares the client's CacheConfig with the daemon's; a mismatch
//     is FAILED_PRECONDITION with a ConfigMismatch detail listing every
//     differing field. On a match the first message is the prebuilt
//     manifest and the open stream is the client's lease.
//   - Stop drains (a KIND_DRAINING notice to every lease, then a bounded
//     wait) or, with force, ends every lease at once. A drain that times out
//     fails with FAILED_PRECONDITION naming the live leases and the daemon
//     keeps serving.
//   - Every connection's peer credentials (SO_PEERCRED) are checked: the
//     daemon's own uid by default, more only through AllowUIDs/AllowGIDs.
//
// Without Options.Model the daemon starts empty (StateEmpty): attaches are
// NOT_FOUND with a NoWeights detail until a client publishes. Publish
// (publish.go) plans the client's tensor table with plan.BuildTable,
// allocates and exports the arenas, hands the client writable handles and
// serves the new generation at the commit; a publish that ends any other
// way frees its allocations and forgets its generation (one publisher per
// config at a time, core/daemon/registry). Evict (evict.go) drains the
// generations it names like Stop, frees them and leaves the daemon running
// with the others; it never frees under a live lease. Only the daemon's
// uid and AllowUIDs may publish or evict.
//
// A daemon holds a set of generations (core/daemon/registry): the models of
// Options.Model and Options.Models, and every publish, each with its own
// CacheConfig, arenas, manifest, leases and state. An attach gets the
// serving generation its config matches; a load or publish is admitted
// against one memory budget counting them all (memory.go); a takeover and a
// plugin restart carry every generation.
//
// Cancelling Run's context (SIGTERM in the serve command) drains for
// DrainTimeout and then stops anyway. If the plugin process exits, the device
// memory it held is gone: every lease ends with UNAVAILABLE "backend plugin
// exited: …", the daemon removes its files and Run returns an error.
//
// Options.Metrics, when set, receives the daemon's operational events (the
// load, attaches with their duration or failure reason, the lease count, the
// state) through the Metrics interface; core/metrics exports them to
// Prometheus. Without it nothing is recorded and this package depends on no
// metrics library.
//
// With Options.Peer.Listen the daemon also serves its generations to other
// nodes' daemons (peerserver.go, fill.Source, over core/peer: mutual TLS,
// bounded), and with Options.Peer.Peers a file load first asks them
// (fill.Net).
//
// Where a change goes: the daemon's lifecycle (daemon.go, run.go), its gRPC
// service (service.go, publish.go, evict.go) are here; the generations, their
// leases and the publish and drain state machine are core/daemon/registry
// (registry.go here names its types as the daemon uses them); filling a generation from elsewhere than the files — a sibling GPU of the
// node, other nodes, and serving other nodes — is core/daemon/fill, behind
// one seam (peerFiller, peerfill.go); serve --takeover, both the successor's
// and the old daemon's side, is core/daemon/handover (takeover.go here makes
// what it received the daemon's). No subpackage imports this one.
//
// Shutdown order: stop accepting new leases, notify leases, wait, end what
// is left, close the peer endpoint (its holds released), stop the gRPC server, remove the ready file and the socket, free
// the allocations, close the plugin, release the lock.
package daemon
