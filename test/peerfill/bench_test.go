package peerfill

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/peer/peertest"
	"github.com/wcache/wcache/test/netns"
)

// benchMiB sizes the benchmark's generation (default 256 MiB); the same
// knob as core/peer's loopback benchmark.
const benchMiB = "WCACHE_BENCH_PEER_MIB"

// BenchmarkVethFillVsTCP measures, over the veth pair between two
// network namespaces, the issue's "cross-node fill ÷ plain TCP" ratio: a
// peer fetch (mutual TLS, every 1 MiB leaf hashed and the arena's content
// digest checked, written into a sink) from peerproc in host A to this
// process's sockets in host B, against one plain TCP stream of the same
// bytes from the same peerproc over the same pair. Each iteration runs
// one of each, back to back, so that a busy machine's load weighs on
// both alike; the metrics are tcp-MB/s, fill-MB/s and fill/tcp (the
// target is ≥ 0.8).
//
//	WCACHE_BENCH_PEER_MIB=256 go test -run '^$' -bench VethFillVsTCP -benchtime 5x ./test/peerfill
func BenchmarkVethFillVsTCP(b *testing.B) {
	size := 256 << 20
	if v := os.Getenv(benchMiB); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive number of MiB", benchMiB, v)
		}
		size = n << 20
	}
	pair := netns.New(b)
	authority := peertest.NewCA(b, "bench CA")
	data := content(size, 5)
	srv := startServer(b, pair.A, authority.Issue(b, "node-a", authority), writeArenas(b, data),
		"-plain-listen", pair.A.Addr.String()+":0")
	client := authority.Issue(b, "node-b", authority)
	dst := make([]byte, size)
	sink := &reusedSink{arena: make([]byte, size)}
	for _, streams := range []int{1, 4, 8} {
		b.Run("streams-"+strconv.Itoa(streams), func(b *testing.B) {
			opts := fetchOptions(pair.B, client, srv.addr)
			opts.Streams, opts.ChunkBytes = streams, peer.DefaultChunkBytes
			var tcp, fill time.Duration
			for b.Loop() {
				start := time.Now()
				if err := readPlain(b.Context(), pair.B, srv.plain, dst); err != nil {
					b.Fatal(err)
				}
				tcp += time.Since(start)
				start = time.Now()
				if _, err := peer.Fetch(b.Context(), identity, sink, opts); err != nil {
					b.Fatal(err)
				}
				fill += time.Since(start)
			}
			mb := float64(b.N) * float64(size) / 1e6
			b.ReportMetric(mb/tcp.Seconds(), "tcp-MB/s")
			b.ReportMetric(mb/fill.Seconds(), "fill-MB/s")
			b.ReportMetric(tcp.Seconds()/fill.Seconds(), "fill/tcp")
		})
	}
}

// readPlain reads len(dst) bytes of the plain stream at addr, from h.
func readPlain(ctx context.Context, h *netns.Host, addr string, dst []byte) error {
	c, err := h.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = io.ReadFull(c, dst)
	return err
}

// reusedSink is a one-arena sink whose memory is allocated once, as the
// plain stream's buffer is, so that neither side pays page faults the
// other does not.
type reusedSink struct{ arena []byte }

func (s *reusedSink) Prepare(_ context.Context, o peer.Offer) error {
	if len(o.Arenas) != 1 || o.Arenas[0].Size != uint64(len(s.arena)) {
		return errors.New("benchmark sink: the offer is not the one arena served")
	}
	return nil
}
func (s *reusedSink) WriteAt(_ int, p []byte, off uint64) error { copy(s.arena[off:], p); return nil }
func (s *reusedSink) Commit(context.Context) error              { return nil }
func (s *reusedSink) Abort(error)                               {}
