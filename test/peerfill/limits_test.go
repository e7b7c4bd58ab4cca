package peerfill

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wcache/wcache/core/peer/peertest"
	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/test/netns"
)

// The peer port against the network (issue 35 item 5): a source that
// holds connections open without a byte, and a source too slow to be
// worth waiting for.

// floodAddr is the second address of host B the silent connections come
// from (netns.Pair.AddAddr): another machine than daemon B to daemon A.
var floodAddr = netip.MustParseAddr("10.231.0.6")

// flood keeps n TCP connections from address from of host h to addr open,
// sending nothing, until the test ends: every connection the server
// closes (refused at accept, or at its handshake deadline) is opened
// again after a short pause, as an attacker would. It returns when the
// first n were opened.
func flood(t *testing.T, h *netns.Host, from netip.Addr, addr string, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	opened := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := h.Run(func() error {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}}
			closed := make(chan struct{}, n)
			open, first := 0, true
			for {
				for open < n {
					c, err := d.DialContext(ctx, "tcp", addr)
					if err != nil {
						if ctx.Err() != nil {
							return nil
						}
						return err
					}
					open++
					wg.Add(1)
					go func() {
						defer wg.Done()
						stop := context.AfterFunc(ctx, func() { c.Close() })
						defer stop()
						_, _ = c.Read(make([]byte, 1)) // until the server (or the test's end) closes it
						c.Close()
						closed <- struct{}{}
					}()
				}
				if first {
					close(opened)
					first = false
				}
				select {
				case <-ctx.Done():
					return nil
				case <-closed:
					open--
				}
			drain:
				for {
					select {
					case <-closed:
						open--
					default:
						break drain
					}
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(500 * time.Millisecond):
				}
			}
		})
		if err != nil {
			t.Errorf("flood from %s: %v", from, err)
			if !poll.Closed(opened) {
				close(opened)
			}
		}
	}()
	<-opened
}

// TestDaemonPeerPortFloodedBySilentSource: another machine (a second
// address of host B) keeps 200 connections to daemon A's peer port open
// without sending a byte — more than the endpoint's limits of old (128
// connections in any state, which such a flood filled before any TLS, so
// that real peers were refused and read their files). A refuses the flood
// before TLS by its source's limits and logs it once, naming the source;
// daemon B, from its own address, is filled from A.
func TestDaemonPeerPortFloodedBySilentSource(t *testing.T) {
	m := model(t)
	ca := peertest.NewCA(t, "wcache test CA")
	pair := netns.New(t)
	if err := pair.AddAddr(pair.B, floodAddr); err != nil {
		t.Fatal(err)
	}
	d := &daemons{a: newNode(t, pair.A), b: newNode(t, pair.B), peerAt: pair.A.Addr.String() + ":" + peerPort}
	d.a.serve(t, m.Dir, append([]string{"--peer-listen", d.peerAt}, certArgs(ca.Issue(t, "node-a", ca))...)...)

	flood(t, pair.B, floodAddr, d.peerAt, 200)
	poll.Eventually(t, startTimeout, "daemon A refusing the flood by its source's limits", func() bool {
		out := d.a.proc.Output()
		return strings.Contains(out, "peer refused before TLS: source limit") && strings.Contains(out, floodAddr.String())
	})

	d.b.cacheDigests(t, m) // B knows its files' content: the fill proves them, an attach by identity passes
	d.b.serve(t, m.Dir, append([]string{"--peers", d.peerAt}, certArgs(ca.Issue(t, "node-b", ca))...)...)
	if g := generation(t, d.b); g.FilledFrom != "peer "+d.peerAt || g.FillFallback != "" {
		t.Fatalf("B's Status while a silent source floods A: filled_from %q, fill_fallback %q: want %q\nA:\n%s\nB:\n%s",
			g.FilledFrom, g.FillFallback, "peer "+d.peerAt, d.a.proc, d.b.proc)
	}
	if code, out := d.b.attach(t, m.Dir); code != 0 {
		t.Fatalf("attach --verify to B: exit %d\n%s", code, out)
	}
	if n := strings.Count(d.a.proc.Output(), "source limit (further refusals"); n != 1 {
		t.Errorf("A logged the flood at warn %d times, want once while the source stays at its limit", n)
	}
}

// TestDaemonSlowPeerGivenUp: daemon A's endpoint is paced far down
// (--peer-rate 256KiB: the 24 MiB checkpoint would take a minute and a
// half). Daemon B, with a minimum rate, gives the fill up at the end of
// its first rate window; with a deadline, at the deadline. Each time B
// serves its files, and its Status and log name the reason.
func TestDaemonSlowPeerGivenUp(t *testing.T) {
	m := model(t)
	ca := peertest.NewCA(t, "wcache test CA")
	for _, c := range []struct {
		name   string
		bounds []string
		reason string
	}{
		{"min rate", []string{"--peer-fill-min-rate", "64MiB", "--peer-fill-rate-window", "1s"}, "peer fill below the minimum rate"},
		{"deadline", []string{"--peer-fill-timeout", "2s", "--peer-fill-min-rate", "0"}, "peer fill deadline passed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := startA(t, m.Dir, ca.Issue(t, "node-a", ca), "--peer-rate", "256KiB")
			d.b.serve(t, m.Dir, append(append([]string{"--peers", d.peerAt}, certArgs(ca.Issue(t, "node-b", ca))...), c.bounds...)...)
			wantFiles(t, d.b, m, c.reason)
		})
	}
}
