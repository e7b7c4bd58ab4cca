package peer_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/peer/peertest"
)

// TestSlowPeerGivenUp: a peer paced far below the fetch's minimum rate
// (64 KiB/s after its first 4 MiB burst) fails the fetch with
// ErrFillTooSlow once a rate window ends short, and one under a deadline
// with ErrFillDeadline; the sink is aborted, never committed, and the
// error says how many bytes had arrived. The same peer with neither bound
// still serves every byte.
func TestSlowPeerGivenUp(t *testing.T) {
	authority := peertest.NewCA(t, "wcache test CA")
	data := content(12<<20, 7)
	addr, _ := serve(t, newSource(data), authority.Issue(t, "node-a", authority), peer.ServerOptions{RateBytesPerSec: 64 << 10})
	client := authority.Issue(t, "node-b", authority)

	for _, c := range []struct {
		name string
		set  func(*peer.FetchOptions)
		want error
		says string
	}{
		{"min rate", func(o *peer.FetchOptions) { o.MinRate, o.RateWindow = 16<<20, 300*time.Millisecond }, peer.ErrFillTooSlow, "in the last 300ms, at least 16777216 B/s asked"},
		{"deadline", func(o *peer.FetchOptions) { o.Deadline = 500 * time.Millisecond }, peer.ErrFillDeadline, "500ms passed with"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sink := &peertest.MemSink{}
			o := fetchOpts(client, addr)
			o.Transport.(*peer.TCPTransport).IOTimeout = time.Minute // the bound under test gives up first
			c.set(&o)
			_, err := peer.Fetch(t.Context(), identity, sink, o)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "of 12582912 bytes received") {
				t.Fatalf("err %v, want %v saying %q", err, c.want, c.says)
			}
			if sink.Committed() || sink.Aborted() == nil || !errors.Is(sink.Aborted(), c.want) {
				t.Fatalf("sink committed %v, aborted %v: want aborted for %v", sink.Committed(), sink.Aborted(), c.want)
			}
		})
	}

	// A healthy peer within generous bounds is not given up.
	fast := authority.Issue(t, "node-c", authority)
	fastAddr, _ := serve(t, newSource(data), fast, peer.ServerOptions{})
	o := fetchOpts(client, fastAddr)
	o.Deadline, o.MinRate, o.RateWindow = 10*time.Minute, 1, time.Minute
	sink := &peertest.MemSink{}
	if _, err := peer.Fetch(t.Context(), identity, sink, o); err != nil || !bytes.Equal(sink.Arena(0), data) || !sink.Committed() {
		t.Fatalf("a healthy fetch within its bounds: %v", err)
	}
}
