package peerfill

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/test/netns"
	"github.com/wcache/wcache/test/testproc"
)

// identity is the weights identity every test serves.
const identity = "sha256:2626262626262626262626262626262626262626262626262626262626262626"

// startTimeout bounds a server's start (generous: the machine may be
// busy; it is not asserted).
const startTimeout = 60 * time.Second

// server is a peerproc running in a host.
type server struct {
	proc  *testproc.Process
	addr  string // the mTLS peer address
	plain string // the plain TCP address ("" unless asked for)
}

// startServer runs peerproc in h, serving the arena files under identity
// with creds, and waits until it listens; extra are more flags. It is
// killed when t ends.
func startServer(t testing.TB, h *netns.Host, creds *peer.Credentials, arenas []string, extra ...string) *server {
	t.Helper()
	bin := os.Getenv(peerprocEnv)
	if bin == "" {
		t.Fatalf("%s is not set (TestMain builds peerproc)", peerprocEnv)
	}
	args := []string{"-listen", net.JoinHostPort(h.Addr.String(), "0"), "-cert", creds.CertFile,
		"-key", creds.KeyFile, "-ca", creds.CAFile, "-identity", identity}
	for _, a := range arenas {
		args = append(args, "-arena", a)
	}
	p, err := h.Start(testproc.Options{Path: bin, Args: append(args, extra...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	const ready = "peer listening on "
	if err := p.WaitOutput(ctx, ready, startTimeout); err != nil {
		t.Fatal(err)
	}
	s := &server{proc: p, addr: lineAfter(p.Stdout(), ready), plain: lineAfter(p.Stdout(), "plain listening on ")}
	if host, _, err := net.SplitHostPort(s.addr); err != nil || host != h.Addr.String() {
		t.Fatalf("peerproc listens on %q, want an address of %s", s.addr, h.Addr)
	}
	return s
}

// lineAfter returns the rest of the first line of out that starts with
// prefix ("" when none).
func lineAfter(out, prefix string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// fetchOptions fetch from addrs with creds, every connection opened in
// host from.
func fetchOptions(from *netns.Host, creds *peer.Credentials, addrs ...string) peer.FetchOptions {
	return peer.FetchOptions{
		Transport: &peer.TCPTransport{Creds: creds, Dial: from.DialContext},
		Peers:     addrs, Streams: 3, ChunkBytes: 2 << 20,
	}
}

// content is n deterministic bytes that differ with seed.
func content(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31+i>>11) ^ seed
	}
	return b
}

// writeArenas writes each arena's bytes to a file of a new folder and
// returns the paths.
func writeArenas(t testing.TB, arenas ...[]byte) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i, a := range arenas {
		p := filepath.Join(dir, "arena"+strconv.Itoa(i))
		if err := os.WriteFile(p, a, 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}
