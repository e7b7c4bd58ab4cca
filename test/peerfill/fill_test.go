package peerfill

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/peer/peertest"
	"github.com/wcache/wcache/sdk/filedigest"
	"github.com/wcache/wcache/test/netns"
)

// TestFillAcrossHosts: host B fetches two arenas from the server in host
// A over mutual TLS; the bytes are the files' and their content digests
// the ones announced, and the sink is committed.
func TestFillAcrossHosts(t *testing.T) {
	pair := netns.New(t)
	authority := peertest.NewCA(t, "wcache test CA")
	a0, a1 := content(9<<20+123, 1), content(1<<20-7, 2)
	srv := startServer(t, pair.A, authority.Issue(t, "node-a", authority), writeArenas(t, a0, a1))

	sink := &peertest.MemSink{}
	res, err := peer.Fetch(t.Context(), identity, sink, fetchOptions(pair.B, authority.Issue(t, "node-b", authority), srv.addr))
	if err != nil {
		t.Fatalf("fetch from %s: %v\n%s", srv.addr, err, srv.proc)
	}
	if !sink.Committed() || sink.Aborted() != nil {
		t.Fatalf("sink committed %v, aborted %v", sink.Committed(), sink.Aborted())
	}
	if !bytes.Equal(sink.Arena(0), a0) || !bytes.Equal(sink.Arena(1), a1) {
		t.Fatal("the bytes fetched across the hosts differ from the server's files")
	}
	if res.Peer != srv.addr || res.Bytes != uint64(len(a0)+len(a1)) || len(res.Offer.Arenas) != 2 ||
		res.Offer.Arenas[0].Digest != filedigest.Bytes(a0) || res.Offer.Arenas[1].Digest != filedigest.Bytes(a1) {
		t.Fatalf("result %+v", res)
	}
}

// TestPeerOfAnotherCARefused: the client refuses a server whose
// certificate another CA signed, and the server refuses a client whose
// certificate another CA signed; the sink is never prepared. The same
// client and server, with certificates of the shared CA, do fill: the
// refusals are the CA's doing.
func TestPeerOfAnotherCARefused(t *testing.T) {
	pair := netns.New(t)
	authority, other := peertest.NewCA(t, "wcache test CA"), peertest.NewCA(t, "someone else's CA")
	files := writeArenas(t, content(3<<20, 1))
	good := startServer(t, pair.A, authority.Issue(t, "node-a", authority), files)
	rogue := startServer(t, pair.A, other.Issue(t, "rogue", other), files)
	client := authority.Issue(t, "node-b", authority)

	t.Run("server of another CA", func(t *testing.T) {
		sink := &peertest.MemSink{}
		_, err := peer.Fetch(t.Context(), identity, sink, fetchOptions(pair.B, client, rogue.addr))
		if !errors.Is(err, peer.ErrNoPeer) || !strings.Contains(err.Error(), "certificate") || sink.Prepared() {
			t.Fatalf("err %v, sink prepared %v: want the server's certificate refused before anything", err, sink.Prepared())
		}
		t.Logf("refused: %v", err)
	})
	t.Run("client of another CA", func(t *testing.T) {
		intruder := other.Issue(t, "intruder", authority) // trusts our CA, signed by another
		sink := &peertest.MemSink{}
		_, err := peer.Fetch(t.Context(), identity, sink, fetchOptions(pair.B, intruder, good.addr))
		if !errors.Is(err, peer.ErrNoPeer) || sink.Prepared() {
			t.Fatalf("err %v, sink prepared %v: want the client refused", err, sink.Prepared())
		}
		t.Logf("refused: %v", err)
		ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
		defer cancel()
		if err := good.proc.WaitOutput(ctx, "peer refused: TLS handshake failed", startTimeout); err != nil {
			t.Fatalf("the server did not log the refusal: %v", err)
		}
	})
	t.Run("both of the shared CA", func(t *testing.T) {
		sink := &peertest.MemSink{}
		if _, err := peer.Fetch(t.Context(), identity, sink, fetchOptions(pair.B, client, good.addr)); err != nil || !sink.Committed() {
			t.Fatalf("err %v, committed %v", err, sink.Committed())
		}
	})
}

// TestServerKilledMidStream: the server process is SIGKILLed while the
// fetch reads (it holds the read that reaches 6 MiB of 16 until then):
// the fetch fails, the sink is aborted and never committed.
func TestServerKilledMidStream(t *testing.T) {
	pair := netns.New(t)
	authority := peertest.NewCA(t, "wcache test CA")
	data := content(16<<20, 3)
	srv := startServer(t, pair.A, authority.Issue(t, "node-a", authority), writeArenas(t, data), "-pause-at", "6291456")

	sink := &peertest.MemSink{}
	done := make(chan error, 1)
	go func() {
		_, err := peer.Fetch(t.Context(), identity, sink, fetchOptions(pair.B, authority.Issue(t, "node-b", authority), srv.addr))
		done <- err
	}()
	ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	if err := srv.proc.WaitOutput(ctx, "paused at 6291456", startTimeout); err != nil {
		t.Fatal(err)
	}
	srv.proc.Kill() // SIGKILL to the process group of the child this test started
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * peer.DefaultIOTimeout):
		t.Fatal("the fetch did not end after its server was killed")
	}
	if err == nil || errors.Is(err, peer.ErrDigestMismatch) {
		t.Fatalf("err %v, want the stream cut short", err)
	}
	t.Logf("fetch: %v", err)
	if !sink.Prepared() || sink.Committed() || sink.Aborted() == nil {
		t.Fatalf("sink prepared %v, committed %v, aborted %v: want prepared, aborted, never committed",
			sink.Prepared(), sink.Committed(), sink.Aborted())
	}
	// Mid-stream: a stream asks for the range past 6 MiB only after it
	// wrote a whole 2 MiB chunk before it.
	got, received := sink.Arena(0), false
	for off := 0; off < 6<<20; off += 2 << 20 {
		received = received || bytes.Equal(got[off:off+2<<20], data[off:off+2<<20])
	}
	if !received {
		t.Fatal("no chunk had arrived when the server was killed: not mid-stream")
	}
	if code := srv.proc.ExitCode(); code != -1 {
		t.Fatalf("peerproc exit code %d, want killed by a signal", code)
	}
}

// TestServerServingDifferentContent: a server announces the digest of the
// right bytes and serves others → *DigestMismatchError naming the digest
// of what came, the sink aborted. An honest server of other content is
// refused by the caller's expected digest before the sink is prepared.
func TestServerServingDifferentContent(t *testing.T) {
	pair := netns.New(t)
	authority := peertest.NewCA(t, "wcache test CA")
	want, other := content(5<<20+9, 1), content(5<<20+9, 7)
	client := authority.Issue(t, "node-b", authority)

	liar := startServer(t, pair.A, authority.Issue(t, "liar", authority), writeArenas(t, other), "-announce", filedigest.Bytes(want))
	sink := &peertest.MemSink{}
	_, err := peer.Fetch(t.Context(), identity, sink, fetchOptions(pair.B, client, liar.addr))
	var dm *peer.DigestMismatchError
	if !errors.Is(err, peer.ErrDigestMismatch) || !errors.As(err, &dm) || dm.Arena != 0 ||
		dm.Want != filedigest.Bytes(want) || dm.Got != filedigest.Bytes(other) {
		t.Fatalf("err %v, want a digest mismatch on arena 0", err)
	}
	if sink.Committed() || sink.Aborted() == nil {
		t.Fatalf("sink committed %v, aborted %v", sink.Committed(), sink.Aborted())
	}

	honest := startServer(t, pair.A, authority.Issue(t, "honest", authority), writeArenas(t, other))
	sink = &peertest.MemSink{}
	opts := fetchOptions(pair.B, client, honest.addr)
	opts.Expect = []string{filedigest.Bytes(want)}
	if _, err := peer.Fetch(t.Context(), identity, sink, opts); !errors.Is(err, peer.ErrDigestMismatch) || sink.Prepared() {
		t.Fatalf("expected digest: err %v, sink prepared %v", err, sink.Prepared())
	}
}
