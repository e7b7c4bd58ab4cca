package peer_test

import (
	"io"
	"net"
	"os"
	"strconv"
	"testing"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/peer/peertest"
)

// benchMiB sizes BenchmarkTransport's generation (default 256 MiB).
const benchMiB = "WCACHE_BENCH_PEER_MIB"

// BenchmarkTransport compares, over loopback, a peer fetch (mutual TLS,
// content digest checked, into memory) on 1 and 4 streams with one plain
// TCP stream of the same bytes: the issue's ratio "cross-node fill ÷
// plain TCP" is a fetch's MB/s over plain-tcp's (on a veth pair or a real
// link in `make bench`; loopback here).
//
//	WCACHE_BENCH_PEER_MIB=1024 go test -run '^$' -bench Transport ./core/peer
func BenchmarkTransport(b *testing.B) {
	size := 256 << 20
	if v := os.Getenv(benchMiB); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("%s=%q: %v", benchMiB, v, err)
		}
		size = n << 20
	}
	data := content(size, 3)
	authority := peertest.NewCA(b, "bench CA")
	addr, _ := serve(b, newSource(data), authority.Issue(b, "node-a", authority), peer.ServerOptions{})
	client := authority.Issue(b, "node-b", authority)
	for _, streams := range []int{1, 4} {
		b.Run("mtls-fetch-streams-"+strconv.Itoa(streams), func(b *testing.B) {
			opts := peer.FetchOptions{Transport: &peer.TCPTransport{Creds: client}, Peers: []string{addr}, Streams: streams}
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := peer.Fetch(b.Context(), identity, &peertest.MemSink{}, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("plain-tcp", func(b *testing.B) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		go peertest.ServePlain(l, data)
		dst := make([]byte, size)
		b.SetBytes(int64(size))
		for b.Loop() {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, dst); err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
}
