package peer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/peer/peertest"
	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/sdk/filedigest"
)

// memSource serves generations from memory. failAt (>= 0) makes ReadAt
// fail once a read reaches that offset of arena 0: the peer dies
// mid-stream. announce, when set, replaces the digests it announces.
type memSource struct {
	gens     map[string]*memGen
	failAt   int64
	announce []string

	mu       sync.Mutex
	open     int
	released int
}

type memGen struct {
	src     *memSource
	id      string
	arenas  [][]byte
	digests []string // computed once, as a daemon records them at load
}

func (s *memSource) Open(_ context.Context, identity string) (peer.Generation, error) {
	g, ok := s.gens[identity]
	if !ok {
		return nil, fmt.Errorf("identity %s: %w", identity, peer.ErrNotHeld)
	}
	s.mu.Lock()
	s.open++
	s.mu.Unlock()
	return g, nil
}

func (g *memGen) ID() string { return g.id }

func (g *memGen) Arenas() []peer.Arena {
	out := make([]peer.Arena, len(g.arenas))
	for i, a := range g.arenas {
		out[i] = peer.Arena{Size: uint64(len(a)), Digest: g.digests[i]}
		if g.src.announce != nil {
			out[i].Digest = g.src.announce[i]
		}
	}
	return out
}

func (g *memGen) ReadAt(_ context.Context, arena int, p []byte, off uint64) error {
	if f := g.src.failAt; f >= 0 && arena == 0 && int64(off)+int64(len(p)) > f {
		return errors.New("injected: the peer died")
	}
	copy(p, g.arenas[arena][off:])
	return nil
}

func (g *memGen) Release() {
	g.src.mu.Lock()
	g.src.released++
	g.src.mu.Unlock()
}

func content(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31+i>>11) ^ seed
	}
	return b
}

const identity = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

func newSource(arenas ...[]byte) *memSource {
	s := &memSource{failAt: -1}
	g := &memGen{src: s, id: "gen-1", arenas: arenas}
	for _, a := range arenas {
		g.digests = append(g.digests, filedigest.Bytes(a))
	}
	s.gens = map[string]*memGen{identity: g}
	return s
}

// serve starts a server of src on loopback and returns its address.
func serve(t testing.TB, src peer.Source, creds *peer.Credentials, opts peer.ServerOptions) (string, *peer.Server) {
	t.Helper()
	srv, err := peer.NewServer(src, creds, opts)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return l.Addr().String(), srv
}

// resolver maps names to addresses.
type resolver map[string][]string

func (r resolver) LookupHost(_ context.Context, host string) ([]string, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func fetchOpts(creds *peer.Credentials, peers ...string) peer.FetchOptions {
	return peer.FetchOptions{Transport: &peer.TCPTransport{Creds: creds, IOTimeout: 5 * time.Second},
		Peers: peers, Streams: 3, ChunkBytes: 2 << 20}
}

func TestFetchHappyPath(t *testing.T) {
	authority := peertest.NewCA(t, "wcache test CA")
	a0, a1 := content(5<<20+123, 1), content(1<<20-7, 2)
	src := newSource(a0, a1)
	addr, _ := serve(t, src, authority.Issue(t, "node-a", authority), peer.ServerOptions{})
	// A second peer that holds nothing is asked first and skipped; the
	// holder is found through one DNS name resolving to both.
	empty := &memSource{failAt: -1, gens: map[string]*memGen{}}
	emptyAddr, _ := serve(t, empty, authority.Issue(t, "node-c", authority), peer.ServerOptions{})
	_, port, _ := net.SplitHostPort(addr)
	_, emptyPort, _ := net.SplitHostPort(emptyAddr)

	sink := &peertest.MemSink{}
	opts := fetchOpts(authority.Issue(t, "node-b", authority), "127.0.0.1:"+emptyPort, "peers.test:"+port)
	opts.Resolver = resolver{"peers.test": {"127.0.0.1", "127.0.0.2"}}
	opts.Self = []string{"127.0.0.2:" + port}
	res, err := peer.Fetch(t.Context(), identity, sink, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !sink.Committed() || sink.Aborted() != nil {
		t.Fatalf("sink committed %v, aborted %v", sink.Committed(), sink.Aborted())
	}
	if !bytes.Equal(sink.Arena(0), a0) || !bytes.Equal(sink.Arena(1), a1) {
		t.Fatal("fetched bytes differ from the peer's")
	}
	if res.Peer != addr || res.Bytes != uint64(len(a0)+len(a1)) || res.Offer.Generation != "gen-1" {
		t.Fatalf("result %+v", res)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.open == 0 || src.open != src.released {
		t.Fatalf("source opened %d times, released %d", src.open, src.released)
	}
}

// TestFetchFromAnOlderPeer: a peer of a build before BLAKE3 offers
// SHA256Tree arena digests (and one arena in each algorithm, in case): the
// fetch hashes each arena in its digest's algorithm and commits; the same
// bytes under a digest of the other algorithm's hash are refused.
func TestFetchFromAnOlderPeer(t *testing.T) {
	authority := peertest.NewCA(t, "wcache test CA")
	a0, a1 := content(3<<20+5, 3), content(1<<20, 4)
	src := newSource(a0, a1)
	g := src.gens[identity]
	g.digests[0] = filedigest.SHA256Tree.Bytes(a0)
	addr, _ := serve(t, src, authority.Issue(t, "node-a", authority), peer.ServerOptions{})
	sink := &peertest.MemSink{}
	if _, err := peer.Fetch(t.Context(), identity, sink, fetchOpts(authority.Issue(t, "node-b", authority), addr)); err != nil {
		t.Fatal(err)
	}
	if !sink.Committed() || !bytes.Equal(sink.Arena(0), a0) || !bytes.Equal(sink.Arena(1), a1) {
		t.Fatalf("sink committed %v, bytes equal %v %v", sink.Committed(), bytes.Equal(sink.Arena(0), a0), bytes.Equal(sink.Arena(1), a1))
	}
	// The SHA-256 tree's hash named as BLAKE3: a mismatch, not a fill.
	g.digests[0] = string(filedigest.BLAKE3Tree) + filedigest.SHA256Tree.Bytes(a0)[len(filedigest.SHA256Tree):]
	sink = &peertest.MemSink{}
	_, err := peer.Fetch(t.Context(), identity, sink, fetchOpts(authority.Issue(t, "node-b", authority), addr))
	var mismatch *peer.DigestMismatchError
	if !errors.As(err, &mismatch) || mismatch.Arena != 0 || sink.Committed() {
		t.Fatalf("Fetch = %v (committed %v), want a *DigestMismatchError for arena 0", err, sink.Committed())
	}
}

func TestPeerFromAnotherCARefused(t *testing.T) {
	authority, other := peertest.NewCA(t, "wcache test CA"), peertest.NewCA(t, "someone else's CA")
	src := newSource(content(3<<20, 1))
	addr, _ := serve(t, src, authority.Issue(t, "node-a", authority), peer.ServerOptions{})

	// A client whose certificate another CA signed (it trusts ours).
	sink := &peertest.MemSink{}
	_, err := peer.Fetch(t.Context(), identity, sink, fetchOpts(other.Issue(t, "intruder", authority), addr))
	if !errors.Is(err, peer.ErrNoPeer) || sink.Prepared() || sink.Committed() {
		t.Fatalf("client of another CA: err %v, sink prepared %v committed %v", err, sink.Prepared(), sink.Committed())
	}
	// A server whose certificate another CA signed: our client refuses it.
	rogue, _ := serve(t, src, other.Issue(t, "rogue", other), peer.ServerOptions{})
	_, err = peer.Fetch(t.Context(), identity, sink, fetchOpts(authority.Issue(t, "node-b", authority), rogue))
	if !errors.Is(err, peer.ErrNoPeer) || !strings.Contains(err.Error(), "certificate") || sink.Prepared() {
		t.Fatalf("server of another CA: %v", err)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.open != 0 {
		t.Fatalf("the source was opened %d times for refused peers", src.open)
	}
}

func TestAllowedNames(t *testing.T) {
	authority := peertest.NewCA(t, "wcache test CA")
	creds := authority.Issue(t, "node-a", authority)
	creds.AllowedNames = []string{"spiffe://test/node-b"}
	addr, _ := serve(t, newSource(content(1<<20, 1)), creds, peer.ServerOptions{})
	if _, err := peer.Fetch(t.Context(), identity, &peertest.MemSink{}, fetchOpts(authority.Issue(t, "node-x", authority), addr)); !errors.Is(err, peer.ErrNoPeer) {
		t.Fatalf("a name not allowed: %v", err)
	}
	if _, err := peer.Fetch(t.Context(), identity, &peertest.MemSink{}, fetchOpts(authority.Issue(t, "node-b", authority), addr)); err != nil {
		t.Fatalf("an allowed name: %v", err)
	}
}

func TestPeerDyingMidStream(t *testing.T) {
	authority := peertest.NewCA(t, "wcache test CA")
	src := newSource(content(12<<20, 1))
	src.failAt = 7 << 20
	addr, _ := serve(t, src, authority.Issue(t, "node-a", authority), peer.ServerOptions{})
	sink := &peertest.MemSink{}
	_, err := peer.Fetch(t.Context(), identity, sink, fetchOpts(authority.Issue(t, "node-b", authority), addr))
	if err == nil || !strings.Contains(err.Error(), "stream ended") {
		t.Fatalf("err %v, want the stream cut short", err)
	}
	if sink.Committed() || sink.Aborted() == nil {
		t.Fatalf("sink committed %v, aborted %v: want aborted, never committed", sink.Committed(), sink.Aborted())
	}
}

// TestPeerKilledMidStream closes the serving peer while a fetch reads (its
// source blocks at 6 MiB until then): the fetch fails, the sink is
// aborted.
func TestPeerKilledMidStream(t *testing.T) {
	authority := peertest.NewCA(t, "wcache test CA")
	src := newSource(content(16<<20, 1))
	reached := make(chan struct{})
	var once sync.Once
	blocking := &blockingSource{memSource: src, at: 6 << 20, reached: func() { once.Do(func() { close(reached) }) }}
	addr, srv := serve(t, blocking, authority.Issue(t, "node-a", authority), peer.ServerOptions{})
	go func() {
		<-reached
		srv.Close() // the peer dies: every connection closed
	}()
	sink := &peertest.MemSink{}
	_, err := peer.Fetch(t.Context(), identity, sink, fetchOpts(authority.Issue(t, "node-b", authority), addr))
	if err == nil || sink.Committed() || sink.Aborted() == nil {
		t.Fatalf("err %v, sink committed %v aborted %v", err, sink.Committed(), sink.Aborted())
	}
}

// blockingSource's ReadAt blocks at offset at of arena 0 until the server
// closes (its context ends).
type blockingSource struct {
	*memSource
	at      uint64
	reached func()
}

func (s *blockingSource) Open(ctx context.Context, identity string) (peer.Generation, error) {
	g, err := s.memSource.Open(ctx, identity)
	if err != nil {
		return nil, err
	}
	return blockingGen{g.(*memGen), s}, nil
}

type blockingGen struct {
	*memGen
	s *blockingSource
}

func (g blockingGen) ReadAt(ctx context.Context, arena int, p []byte, off uint64) error {
	if arena == 0 && off+uint64(len(p)) > g.s.at {
		g.s.reached()
		<-ctx.Done()
		return ctx.Err()
	}
	return g.memGen.ReadAt(ctx, arena, p, off)
}

func TestPeerServingDifferentContent(t *testing.T) {
	authority := peertest.NewCA(t, "wcache test CA")
	want, other := content(3<<20+5, 1), content(3<<20+5, 9)
	// The peer announces the digest of the right content but serves other
	// bytes (corruption, a bug, a lie).
	src := newSource(other)
	src.announce = []string{filedigest.Bytes(want)}
	addr, _ := serve(t, src, authority.Issue(t, "node-a", authority), peer.ServerOptions{})
	client := authority.Issue(t, "node-b", authority)
	sink := &peertest.MemSink{}
	_, err := peer.Fetch(t.Context(), identity, sink, fetchOpts(client, addr))
	var dm *peer.DigestMismatchError
	if !errors.Is(err, peer.ErrDigestMismatch) || !errors.As(err, &dm) || dm.Arena != 0 || dm.Got != filedigest.Bytes(other) {
		t.Fatalf("err %v, want a digest mismatch on arena 0", err)
	}
	if sink.Committed() || sink.Aborted() == nil {
		t.Fatalf("sink committed %v, aborted %v", sink.Committed(), sink.Aborted())
	}

	// An honest peer with other content, refused by the caller's expected
	// digest before a byte is read.
	honest := newSource(other)
	addr2, _ := serve(t, honest, authority.Issue(t, "node-c", authority), peer.ServerOptions{})
	sink = &peertest.MemSink{}
	opts := fetchOpts(client, addr2)
	opts.Expect = []string{filedigest.Bytes(want)}
	if _, err := peer.Fetch(t.Context(), identity, sink, opts); !errors.Is(err, peer.ErrDigestMismatch) || sink.Prepared() {
		t.Fatalf("expected digest: err %v, sink prepared %v", err, sink.Prepared())
	}
}

func TestConnectionLimitAnswersBusy(t *testing.T) {
	authority := peertest.NewCA(t, "wcache test CA")
	addr, _ := serve(t, newSource(content(1<<20, 1)), authority.Issue(t, "node-a", authority), peer.ServerOptions{MaxConnsPerPeer: 1})
	tr := &peer.TCPTransport{Creds: authority.Issue(t, "node-b", authority)}
	offer, err := tr.Describe(t.Context(), addr, identity)
	if err != nil {
		t.Fatal(err)
	}
	// The server counts Describe's connection until it reads its close, so
	// a session opened right after it may still find the one connection
	// taken (and is answered busy).
	var s peer.Session
	poll.Eventually(t, 10*time.Second, "a session admitted", func() bool {
		try, err := tr.Open(t.Context(), addr, offer)
		if err != nil {
			t.Fatal(err)
		}
		if err := try.ReadRange(t.Context(), 0, 0, make([]byte, 4096)); err != nil {
			try.Close()
			if !errors.Is(err, peer.ErrBusy) {
				t.Fatal(err)
			}
			return false
		}
		s = try // it holds the peer's one connection
		return true
	})
	defer s.Close()
	_, err = tr.Describe(t.Context(), addr, identity)
	if !errors.Is(err, peer.ErrBusy) || !strings.Contains(err.Error(), "this client has 1 connections open, at most 1") {
		t.Fatalf("a second connection: %v, want ErrBusy naming the per-client limit", err)
	}
	if err := s.ReadRange(t.Context(), 0, 1<<20-1, make([]byte, 2)); !errors.Is(err, peer.ErrInvalid) {
		t.Fatalf("a range past the arena: %v, want ErrInvalid", err)
	}
}

func TestCredentialsMissingFilesFailAtStart(t *testing.T) {
	authority := peertest.NewCA(t, "wcache test CA")
	creds := authority.Issue(t, "node-a", authority)
	creds.KeyFile = filepath.Join(t.TempDir(), "absent.key")
	if _, err := peer.NewServer(newSource(content(1, 1)), creds, peer.ServerOptions{}); err == nil || !strings.Contains(err.Error(), "absent.key") {
		t.Fatalf("NewServer with a missing key: %v", err)
	}
}

func TestResolvePeers(t *testing.T) {
	r := resolver{"peers.svc": {"10.0.0.1", "10.0.0.2", "10.0.0.3"}}
	got, err := peer.ResolvePeers(t.Context(), r, []string{"10.0.0.9:7000", "peers.svc:7000", "10.0.0.9:7000", "gone.svc:7000"}, []string{"10.0.0.2:7000"})
	want := []string{"10.0.0.9:7000", "10.0.0.1:7000", "10.0.0.3:7000"}
	if err != nil || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("ResolvePeers = %v (%v), want %v", got, err, want)
	}
	if _, err := peer.ResolvePeers(t.Context(), r, []string{"gone.svc:7000", "no-port"}, nil); !errors.Is(err, peer.ErrNoPeer) ||
		!strings.Contains(err.Error(), "gone.svc") || !strings.Contains(err.Error(), "no-port") {
		t.Fatalf("no peer left: %v", err)
	}
}

// A rate-limited server still serves every byte (the limit's effect on
// time belongs in the benchmarks), and an offer over the caller's budget
// is refused before the sink is prepared.
func TestRateLimitAndBudget(t *testing.T) {
	authority := peertest.NewCA(t, "wcache test CA")
	data := content(3<<20+1, 4)
	addr, _ := serve(t, newSource(data), authority.Issue(t, "node-a", authority), peer.ServerOptions{RateBytesPerSec: 256 << 20})
	client := authority.Issue(t, "node-b", authority)
	sink := &peertest.MemSink{}
	if _, err := peer.Fetch(t.Context(), identity, sink, fetchOpts(client, addr)); err != nil || !bytes.Equal(sink.Arena(0), data) {
		t.Fatalf("rate-limited fetch: %v", err)
	}
	sink = &peertest.MemSink{}
	opts := fetchOpts(client, addr)
	opts.MaxBytes = uint64(len(data)) - 1
	if _, err := peer.Fetch(t.Context(), identity, sink, opts); err == nil || sink.Prepared() {
		t.Fatalf("offer over the budget: err %v, sink prepared %v", err, sink.Prepared())
	}
}
