// Command peerproc is the peer server of the cross-node tests
// (test/peerfill): it serves files' bytes as one generation of a
// core/peer Source, over mutual TLS with certificates from files, in a
// process of its own that a test runs in another network namespace and
// may kill. It is not product code: the daemon's --peer-listen replaces
// it once wired.
//
//	peerproc -listen 10.231.0.1:0 -cert tls.crt -key tls.key -ca ca.crt \
//	  -identity sha256:… -arena a.bin [-arena b.bin] \
//	  [-announce DIGEST,…] [-pause-at BYTES] [-plain-listen ADDR]
//
// It prints "peer listening on ADDR" (and "plain listening on ADDR") once
// serving, logs refused handshakes to stderr, and with -pause-at prints
// "paused at N" when a read first reaches offset N of arena 0, then holds
// that read until it is killed.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "peerproc:", err)
		os.Exit(1)
	}
}
