// Package peerfill tests cross-node peer fill between two hosts made of
// network namespaces joined by a veth pair (test/netns): a real peer
// server process (peerproc, serving files' bytes as a core/peer Source
// over mutual TLS) in host A, and core/peer.Fetch from host B, its
// connections opened inside B. What the tests assert is behaviour —
// bytes equal, errors named, the sink committed or not — never time;
// BenchmarkVethFillVsTCP measures the rates.
//
// Without the capabilities to make namespaces (root in CI) every test
// skips and says why. Until the daemon serves peers (--peer-listen) the
// server is peerproc; then the same cases run between two daemons.
package peerfill

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/test/netns"
	"github.com/wcache/wcache/test/testproc"
)

// peerprocEnv carries the path of the built peerproc from TestMain to the
// tests (an environment variable rather than a package variable: no
// mutable globals); set it to reuse a binary built elsewhere.
const peerprocEnv = "WCACHE_PEERPROC"

// binDirEnv carries the folder of the built wcache and mock plugin (the
// daemon cases), as WCACHE_E2E_BIN does for test/e2e.
const binDirEnv = "WCACHE_PEERFILL_BIN"

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if _, err := netns.Available(); err != nil || os.Getenv(peerprocEnv) != "" {
		return m.Run() // the tests skip, or use the given binary
	}
	dir, err := os.MkdirTemp("", "wcache-peerfill-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "peerfill: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "peerproc")
	if err := childproc.GoBuild(bin, "./peerproc", false); err != nil {
		fmt.Fprintf(os.Stderr, "peerfill: %v\n", err)
		return 1
	}
	if err := os.Setenv(peerprocEnv, bin); err != nil {
		fmt.Fprintf(os.Stderr, "peerfill: %v\n", err)
		return 1
	}
	if os.Getenv(binDirEnv) == "" {
		if err := testproc.InstallBinaries(dir, binDirEnv, false); err != nil {
			fmt.Fprintf(os.Stderr, "peerfill: %v\n", err)
			return 1
		}
	}
	return m.Run()
}
