package peer_test

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/peer/peertest"
	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/internal/poll"
)

// debugLogger is a server logger at debug level writing into log, which
// the test reads while the server writes.
func debugLogger(log *childproc.Buffer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: log, Level: hclog.Debug})
}

// silent opens n TCP connections from the loopback address from that send
// nothing, and closes them when the test ends.
func silent(t *testing.T, from, addr string, n int) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	for range n {
		c, err := d.DialContext(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatalf("silent connection %s -> %s: %v", from, addr, err)
		}
		t.Cleanup(func() { c.Close() })
	}
}

// TestSilentSourceCannotFillTheEndpoint opens, from one address, many
// more connections that never send a byte than the endpoint's limit of
// handshakes in progress: they take their source's handshake slots only,
// are refused before TLS (the log names the source and the limit), and a
// peer from another address fills. Two such sources fill the endpoint's
// bound of handshakes in all (set low here): a third address is refused
// too, by that bound, named. When the silent connections close, their
// source's slots are free again.
func TestSilentSourceCannotFillTheEndpoint(t *testing.T) {
	authority := peertest.NewCA(t, "wcache test CA")
	data := content(3<<20+11, 5)
	var log childproc.Buffer
	opts := peer.ServerOptions{MaxHandshakesPerSource: 4, MaxConnsPerSource: 6, MaxHandshakes: 8, HandshakeTimeout: time.Minute, Logger: debugLogger(&log)}
	addr, _ := serve(t, newSource(data), authority.Issue(t, "node-a", authority), opts)
	_, port, _ := net.SplitHostPort(addr)
	client := authority.Issue(t, "node-b", authority)
	fetchFrom := func(local string) error {
		o := fetchOpts(client, addr)
		o.Transport.(*peer.TCPTransport).Dial = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}).DialContext
		sink := &peertest.MemSink{}
		_, err := peer.Fetch(t.Context(), identity, sink, o)
		if err == nil && !bytes.Equal(sink.Arena(0), data) {
			return errors.New("fetched bytes differ")
		}
		return err
	}

	silent(t, "127.0.0.2", "127.0.0.1:"+port, 40)
	poll.Eventually(t, 20*time.Second, "the server refusing 127.0.0.2 by its source limit", func() bool {
		return strings.Contains(log.String(), "127.0.0.2/32 has 4 TLS handshakes in progress, at most 4")
	})
	if err := fetchFrom("127.0.0.1"); err != nil {
		t.Fatalf("a peer from another address while 127.0.0.2 floods: %v", err)
	}
	if n := strings.Count(log.String(), "peer refused before TLS: source limit (further"); n != 1 {
		t.Fatalf("the flood of one source was logged at warn %d times, want once:\n%s", n, log.String())
	}

	// A second silent source takes the other 4 handshake slots of all: the
	// bound of all sources refuses a third address.
	silent(t, "127.0.0.3", "127.0.0.1:"+port, 4)
	poll.Eventually(t, 20*time.Second, "the second source's handshakes counted", func() bool {
		c, err := net.DialTCP("tcp", &net.TCPAddr{IP: net.ParseIP("127.0.0.4")}, &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: atoiPort(t, port)})
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		return strings.Contains(log.String(), "8 TLS handshakes in progress from all sources, at most 8")
	})
	if err := fetchFrom("127.0.0.5"); err == nil {
		t.Fatal("a fetch while every handshake slot is taken succeeded; want it refused by the bound of all sources")
	}
}

func atoiPort(t *testing.T, port string) int {
	t.Helper()
	p, err := net.LookupPort("tcp", port)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSilentConnectionsEndAtTheHandshakeDeadline: connections that send
// nothing are closed at HandshakeTimeout (the log says so) and their
// source's slots are free again: a peer from the same address fills.
func TestSilentConnectionsEndAtTheHandshakeDeadline(t *testing.T) {
	authority := peertest.NewCA(t, "wcache test CA")
	data := content(1<<20, 6)
	var log childproc.Buffer
	opts := peer.ServerOptions{MaxHandshakesPerSource: 2, HandshakeTimeout: 200 * time.Millisecond, Logger: debugLogger(&log)}
	addr, _ := serve(t, newSource(data), authority.Issue(t, "node-a", authority), opts)
	_, port, _ := net.SplitHostPort(addr)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.6")}}
	var conns []net.Conn
	for range 2 {
		c, err := d.DialContext(t.Context(), "tcp", "127.0.0.1:"+port)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	// The server closes each at its handshake deadline: the read ends.
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("a silent connection was answered")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("a silent connection outlived the handshake deadline by 30s")
		}
	}
	poll.Eventually(t, 20*time.Second, "the handshake deadline logged", func() bool {
		return strings.Count(log.String(), "TLS handshake failed") >= 2
	})
	o := fetchOpts(authority.Issue(t, "node-b", authority), addr)
	o.Transport.(*peer.TCPTransport).Dial = d.DialContext
	if _, err := peer.Fetch(t.Context(), identity, &peertest.MemSink{}, o); err != nil {
		t.Fatalf("a peer from the same address after its silent connections ended: %v", err)
	}
}
