package peer

import "context"

// Transport moves a generation's bytes from a peer. It is the seam for
// other data planes: TCPTransport (TCP, mutual TLS) is the one built; an
// RDMA transport (UCX, Mooncake's transfer engine, NIXL) implements the
// same two calls, its Session reading a range with a one-sided READ
// (docs/peer-fill.md).
type Transport interface {
	// Describe asks peer what it holds under identity; ErrNotHeld (as a
	// *RemoteError) when nothing.
	Describe(ctx context.Context, peer, identity string) (Offer, error)
	// Open starts a session reading offer's generation from peer. Fetch
	// opens several and uses each from one goroutine.
	Open(ctx context.Context, peer string, offer Offer) (Session, error)
}

// Session reads ranges of one generation from one peer, one after the
// other.
type Session interface {
	// ReadRange fills p with arena's bytes [off, off+len(p)). A peer that
	// stops sending (dies, or stalls past the transport's timeout) is an
	// error; so is ctx's end.
	ReadRange(ctx context.Context, arena int, off uint64, p []byte) error
	// Close ends the session.
	Close() error
}
