// Package peertest gives tests of peer fill what they all need: a
// certificate authority made for one test that issues mutual-TLS
// credentials as files (as cert-manager or spiffe-helper write them), and
// a Sink that keeps a fetch in memory and records whether it was committed
// or aborted; and ServePlain, the plain TCP stream the benchmarks compare
// a fetch with.
//
// It is used by core/peer's own tests and by the cross-node tests under
// test/ (test/peerfill), which hand the files to a server in another
// network namespace. The daemon does not link it.
package peertest
