package daemon

import (
	"sync"
	"time"

	"github.com/wcache/wcache/core/fdchannel"
)

// attachWaits pairs a descriptor channel request of op ATTACH_WAIT with
// the Attach that carries its token (AttachRequest.fd_wait_token),
// whichever reaches the daemon first: the Attach hands over the lease it
// made, or that it failed, and the request's goroutine answers with the
// lease's descriptors. The client sends the request before its Attach, so
// its descriptors travel while the manifest does instead of in a second
// exchange after it. A pairing is forgotten once the request is answered,
// or ttl after either side came. The zero value is ready.
type attachWaits struct {
	// ttl is how long a pairing is kept without its request's answer
	// (zero: fdRequestTimeout, the request connection's own bound).
	ttl time.Duration

	mu sync.Mutex
	m  map[[fdchannel.TokenSize]byte]*attachWait
}

// attachWait is one token's pairing.
type attachWait struct {
	done    chan struct{} // closed when the Attach side resolved it
	lease   *lease        // the Attach's lease; nil when it failed
	reason  string        // why there is no lease
	attach  bool          // an Attach took the token
	request bool          // a request took the token
	timer   *time.Timer   // forgets the pairing
}

// entry returns token's pairing, made (with its timer) if absent; the
// caller holds mu.
func (w *attachWaits) entry(token [fdchannel.TokenSize]byte) *attachWait {
	if e := w.m[token]; e != nil {
		return e
	}
	if w.m == nil {
		w.m = map[[fdchannel.TokenSize]byte]*attachWait{}
	}
	e := &attachWait{done: make(chan struct{})}
	ttl := w.ttl
	if ttl <= 0 {
		ttl = fdRequestTimeout
	}
	e.timer = time.AfterFunc(ttl, func() { w.forget(token, e) })
	w.m[token] = e
	return e
}

// forget drops token's pairing if it is still e.
func (w *attachWaits) forget(token [fdchannel.TokenSize]byte, e *attachWait) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m[token] == e {
		delete(w.m, token)
		e.timer.Stop()
	}
}

// attachSide is an Attach's hold on its token's pairing; nil (the Attach
// carries no valid token, or a second Attach reuses one) does nothing.
type attachSide struct {
	e        *attachWait
	resolved bool
}

// begin takes token (AttachRequest.fd_wait_token) for an Attach: nil unless
// it is TokenSize bytes that no other Attach took.
func (w *attachWaits) begin(token []byte) *attachSide {
	if len(token) != fdchannel.TokenSize {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.entry([fdchannel.TokenSize]byte(token))
	if e.attach {
		return nil
	}
	e.attach = true
	return &attachSide{e: e}
}

// resolve hands the Attach's lease to the request (l nil: the Attach
// failed, for reason). Only the first call of a side counts.
func (a *attachSide) resolve(l *lease, reason string) {
	if a == nil || a.resolved {
		return
	}
	a.resolved = true
	a.e.lease, a.e.reason = l, reason
	close(a.e.done)
}

// await is the request's side: the lease of the Attach that carries token,
// or nil and why there is none (the Attach failed, none came within
// timeout, or another request took the token). It forgets the pairing.
func (w *attachWaits) await(token [fdchannel.TokenSize]byte, timeout time.Duration) (*lease, string) {
	w.mu.Lock()
	e := w.entry(token)
	taken := e.request
	e.request = true
	w.mu.Unlock()
	if taken {
		return nil, "another request waits for this token's attach"
	}
	defer w.forget(token, e)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-e.done:
		return e.lease, e.reason
	case <-t.C:
		return nil, "no attach with this fd_wait_token came within " + timeout.String()
	}
}
