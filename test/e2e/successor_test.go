package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/peer/peertest"
)

// TestTakeoverFakeSuccessorSayingServingEndsNothing: a same-uid client
// holding a lease plays a successor's part of the takeover exchange to the
// letter — TAKEOVER, "imported", waits for "released", "serving" — and
// closes, without ever taking the lock, listening or writing a ready file.
// The daemon does not take its word: it does not see it serve
// (daemonfile.VerifySuccessor), takes its lock back and serves on with the
// same pid, generation and leases; its ready file names it again, attach
// --verify passes, and a real successor still takes over afterwards.
func TestTakeoverFakeSuccessorSayingServingEndsNothing(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	d, before, held := h.serveHolding(model)
	fake := h.mustAttachGo(h.UUIDs[0], clientConfig(t, model.Dir))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tk := h.mustRequestTakeover(ctx, fake)
	fdchannel.CloseAll(tk.Descriptors)
	if err := tk.Imported(); err != nil {
		t.Fatalf("imported: %v", err)
	}
	if err := tk.Serving(); err != nil {
		t.Fatalf("serving: %v", err)
	}
	tk.Close()
	_ = fake.Lease.Close()
	checkServesOn(t, d, "takeover: serving again", held.Lease, "a fake successor's \"serving\"")
	if !strings.Contains(d.Output(), "the successor is not seen serving") {
		t.Errorf("the daemon does not say why it served on:\n%s", d)
	}
	h.checkServedOnUnchanged(before, held, model, "the fake successor")

	next := h.start("serve", "--backend", "mock", "--gpu-id", "0", "--takeover")
	h.waitReady(next, h.Paths(h.UUIDs[0]).Ready)
	if code := h.waitExit(d, 30*time.Second); code != 0 {
		t.Errorf("the daemon taken over exited %d, want 0:\n%s", code, d)
	}
	checkLeaseLives(t, held.Lease, "the real takeover")
	checkBytes(t, held.Manifest, model, 0)
}

// takeoverRounds is how many successive takeovers
// TestTakeoverKeepsThePeerPortOverRounds runs.
const takeoverRounds = 8

// TestTakeoverKeepsThePeerPortOverRounds: a daemon serving peers on a
// fixed --peer-listen address is replaced by `serve --takeover` with the
// same address, takeoverRounds times in a row. Every successor starts
// (none fails on "address already in use"), serves peers on the socket
// the old daemon passed it, and every old daemon exits 0 only after its
// successor serves; after each round the peer port answers a Describe of
// the weights over mutual TLS, the lease held from the start lives on
// and its bytes are the model's.
func TestTakeoverKeepsThePeerPortOverRounds(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	addr, args, probe := peerListen(t)
	d := h.startServe(0, model.Dir, args...)
	first := h.statusOf(0)
	describe := func(round int) {
		t.Helper()
		o, err := describeWeights(t, probe, addr, first.Config)
		if err != nil {
			t.Fatalf("round %d: the peer port %s: %v", round, addr, err)
		}
		if len(o.Arenas) == 0 {
			t.Fatalf("round %d: the peer port offers no arena: %+v", round, o)
		}
	}
	describe(0)
	held := h.mustAttachGo(h.UUIDs[0], clientConfig(t, model.Dir))
	for round := 1; round <= takeoverRounds; round++ {
		next := h.start(append([]string{"serve", "--backend", "mock", "--gpu-id", "0", "--takeover"}, args...)...)
		h.waitReady(next, h.Paths(h.UUIDs[0]).Ready)
		if code := h.waitExit(d, 30*time.Second); code != 0 {
			t.Fatalf("round %d: the daemon taken over exited %d, want 0:\n%s\n%s", round, code, d, next)
		}
		if next.Exited() {
			t.Fatalf("round %d: the successor exited:\n%s", round, next)
		}
		if !strings.Contains(next.Output(), "serving on the listener of the daemon taken over") {
			t.Fatalf("round %d: the successor did not serve peers on the passed listener:\n%s", round, next)
		}
		if st := h.statusOf(0); st.PID != next.PID() || st.Generation != first.Generation || st.StartPhases.Source != "takeover" {
			t.Fatalf("round %d: pid %d generation %d source %q, want pid %d generation %d source takeover",
				round, st.PID, st.Generation, st.StartPhases.Source, next.PID(), first.Generation)
		}
		describe(round)
		checkLeaseLives(t, held.Lease, fmt.Sprintf("takeover round %d", round))
		d = next
	}
	checkBytes(t, held.Manifest, model, 0)
}

// TestTakeoverFailedSuccessorGivesThePeerPortBack: a successor started
// with the same --peer-listen address dies right after it imported the
// descriptors (test hook WCACHE_TEST_TAKEOVER_DIE_AFTER=imported), holding
// the peer socket the old daemon passed it with "released". The old daemon
// takes its lock back and accepts peers again on its own copy of that
// socket: the port answers a Describe of the weights, and a later
// successor takes the port over.
func TestTakeoverFailedSuccessorGivesThePeerPortBack(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	addr, args, probe := peerListen(t)
	old := h.startServe(0, model.Dir, args...)
	cfg := h.statusOf(0).Config
	describe := func(when string) {
		t.Helper()
		if o, err := describeWeights(t, probe, addr, cfg); err != nil || len(o.Arenas) == 0 {
			t.Fatalf("%s: the peer port %s: %+v, %v", when, addr, o, err)
		}
	}
	held := h.mustAttachGo(h.UUIDs[0], clientConfig(t, model.Dir))
	dying := h.startWith(func(c *exec.Cmd) { c.Env = append(c.Env, "WCACHE_TEST_TAKEOVER_DIE_AFTER=imported") },
		append([]string{"serve", "--backend", "mock", "--gpu-id", "0", "--takeover"}, args...)...)
	h.waitExit(dying, 30*time.Second)
	checkServesOn(t, old, "takeover: serving again", held.Lease, "the successor's death")
	describe("after the failed takeover")

	next := h.start(append([]string{"serve", "--backend", "mock", "--gpu-id", "0", "--takeover"}, args...)...)
	h.waitReady(next, h.Paths(h.UUIDs[0]).Ready)
	if code := h.waitExit(old, 30*time.Second); code != 0 {
		t.Errorf("the daemon taken over exited %d, want 0:\n%s", code, old)
	}
	describe("after the second takeover")
	checkLeaseLives(t, held.Lease, "the second takeover")
}

// peerListen makes a CA, a node certificate and a probe certificate, and
// returns a free loopback address, the serve flags that listen for peers
// there with the node's credentials, and a transport that speaks to that
// port as a peer of the same CA.
func peerListen(t *testing.T) (addr string, args []string, probe *peer.TCPTransport) {
	t.Helper()
	ca := peertest.NewCA(t, "ca")
	creds := ca.Issue(t, "node", ca)
	probe = &peer.TCPTransport{Creds: ca.Issue(t, "probe", ca), DialTimeout: 10 * time.Second, IOTimeout: 10 * time.Second}
	addr = freeLoopbackAddr(t)
	args = []string{"--peer-listen", addr, "--peer-cert", creds.CertFile, "--peer-key", creds.KeyFile, "--peer-ca", creds.CAFile}
	return addr, args, probe
}

// describeWeights asks the peer port at addr, as probe, within 20 s, what
// it offers of the weights of cfg loaded from files; a cfg without a
// weights identity ends the test.
func describeWeights(t *testing.T, probe *peer.TCPTransport, addr string, cfg cacheconfig.Config) (peer.Offer, error) {
	t.Helper()
	identity, err := cacheconfig.WeightsIdentity(cfg, cacheconfig.WeightsFromFiles)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return probe.Describe(ctx, addr, identity)
}

// freeLoopbackAddr is a 127.0.0.1 address whose port was free a moment
// ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
