package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/fdchannel"
)

// TestAttachWaitsPairEitherWay: an ATTACH_WAIT request and its Attach meet
// whichever comes first; a refused Attach answers "failed"; a second
// request for a token is refused and a second Attach on it ignored; a
// request whose Attach never comes gives up; nothing is kept afterwards,
// and an Attach whose request never comes is forgotten after the ttl.
func TestAttachWaitsPairEitherWay(t *testing.T) {
	// A ttl no busy machine reaches between a test's steps; the ttl case
	// below has a short one of its own.
	w := &attachWaits{ttl: time.Minute}
	tok := func(b byte) [fdchannel.TokenSize]byte { var t [fdchannel.TokenSize]byte; t[0] = b; return t }
	l := &lease{ID: 7}

	// The request first, then the Attach.
	t1 := tok(1)
	got := make(chan *lease, 1)
	go func() { l, _ := w.await(t1, 5*time.Second); got <- l }()
	for !requested(w, t1) {
		time.Sleep(time.Millisecond) // the request registered
	}
	a := w.begin(t1[:])
	if a == nil {
		t.Fatal("begin refused a fresh token")
	}
	a.resolve(l, "")
	a.resolve(nil, "the attach failed") // a later resolve counts for nothing
	if r := <-got; r != l {
		t.Fatalf("request first: got lease %v, want %v", r, l)
	}

	// The Attach first; a second Attach on the token is ignored.
	t2 := tok(2)
	a = w.begin(t2[:])
	if w.begin(t2[:]) != nil {
		t.Error("a second Attach took a token already taken")
	}
	a.resolve(l, "")
	if r, why := w.await(t2, 5*time.Second); r != l {
		t.Fatalf("Attach first: got %v (%s), want lease 7", r, why)
	}

	// A second request for a token is refused; a refused Attach answers
	// the first at once.
	t3 := tok(3)
	a = w.begin(t3[:])
	first := make(chan string, 1)
	go func() { _, why := w.await(t3, 5*time.Second); first <- why }()
	for !requested(w, t3) {
		time.Sleep(time.Millisecond) // the first request registered
	}
	if r, why := w.await(t3, 5*time.Second); r != nil || !strings.Contains(why, "another request") {
		t.Errorf("second request on a token: %v, %q; want refused", r, why)
	}
	a.resolve(nil, "the attach failed")
	if why := <-first; why != "the attach failed" {
		t.Errorf("refused Attach: %q, want the attach failed", why)
	}

	// No Attach: the request gives up after its timeout.
	if r, why := w.await(tok(4), 30*time.Millisecond); r != nil || !strings.Contains(why, "no attach") {
		t.Errorf("no Attach: %v, %q", r, why)
	}
	if n := pendingPairs(w); n != 0 {
		t.Errorf("%d pairings kept after every request was answered", n)
	}

	// An Attach whose request never comes is forgotten after the ttl.
	w = &attachWaits{ttl: 50 * time.Millisecond}
	w.begin([]byte(string(make([]byte, fdchannel.TokenSize-1))+"\x05")).resolve(l, "")
	deadline := time.Now().Add(5 * time.Second)
	for pendingPairs(w) != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := pendingPairs(w); n != 0 {
		t.Errorf("%d pairings kept past the ttl", n)
	}
	if w.begin(make([]byte, 5)) != nil {
		t.Error("begin took a token of 5 bytes")
	}
}

// pendingPairs counts the pairings w keeps.
func pendingPairs(w *attachWaits) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}

// requested reports whether a request waits on token in w.
func requested(w *attachWaits, token [fdchannel.TokenSize]byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m[token] != nil && w.m[token].request
}
