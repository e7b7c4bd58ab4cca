package peer

import (
	"context"
	"errors"
	"fmt"
)

// ProtocolVersion is the wcache.peer.v1 version this package speaks.
const ProtocolVersion = 1

// Arena is one allocation of a generation: its size in bytes and the
// content digest of its bytes (sdk/filedigest: "blake3-tree-1m:…" or
// "sha256-tree-1m:…"; the fetch checks it in its own algorithm).
type Arena struct {
	Size   uint64
	Digest string
}

// Offer is a generation a peer holds under a weights identity.
type Offer struct {
	Identity string
	// Generation names the generation; a read of another one fails with
	// ErrGenerationChanged.
	Generation string
	Arenas     []Arena
}

// Bytes is the total size of the offer's arenas (saturating at the
// largest uint64, so a hostile offer cannot wrap it).
func (o Offer) Bytes() uint64 {
	var n uint64
	for _, a := range o.Arenas {
		if n+a.Size < n {
			return ^uint64(0)
		}
		n += a.Size
	}
	return n
}

// Errors callers branch on (errors.Is).
var (
	// ErrNotHeld: the peer holds no generation of that identity.
	ErrNotHeld = errors.New("peer holds no such weights")
	// ErrGenerationChanged: the generation a read names is no longer
	// served (the peer evicted or reloaded it).
	ErrGenerationChanged = errors.New("peer's generation changed")
	// ErrBusy: the peer is at its connection limit.
	ErrBusy = errors.New("peer busy")
	// ErrInvalid: a malformed request or a range outside an arena.
	ErrInvalid = errors.New("invalid peer request")
	// ErrDigestMismatch: bytes received do not have the content digest
	// the peer announced (or the one the caller expected).
	ErrDigestMismatch = errors.New("peer content digest mismatch")
	// ErrNoPeer: no peer could serve the identity.
	ErrNoPeer = errors.New("no peer serves these weights")
)

// RemoteError is an error a peer answered with.
type RemoteError struct {
	Peer    string
	Kind    error // one of the errors above; ErrInvalid for unknown codes
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("peer %s: %s: %v", e.Peer, e.Message, e.Kind)
}

func (e *RemoteError) Unwrap() error { return e.Kind }

// DigestMismatchError names the arena whose bytes did not match.
type DigestMismatchError struct {
	Peer      string
	Arena     int
	Want, Got string
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("peer %s: arena %d: content digest %s, want %s", e.Peer, e.Arena, e.Got, e.Want)
}

func (e *DigestMismatchError) Is(target error) bool { return target == ErrDigestMismatch }

// Source is what a Server serves: the generations a daemon holds, found by
// weights identity. The daemon implements it over its arenas.
type Source interface {
	// Open returns the generation held under identity, held (its memory
	// not freed, as a lease holds it) until Release; ErrNotHeld when
	// there is none.
	Open(ctx context.Context, identity string) (Generation, error)
}

// Generation is one held generation of a Source.
type Generation interface {
	// ID names the generation (stable while it is served).
	ID() string
	// Arenas lists its arenas with their sizes and content digests. It is
	// called for every request: return digests recorded once (at load),
	// never computed here.
	Arenas() []Arena
	// ReadAt fills p with arena's bytes at off (the range lies inside the
	// arena; the server checks it).
	ReadAt(ctx context.Context, arena int, p []byte, off uint64) error
	// Release ends the hold Open took.
	Release()
}

// Sink receives a fetched generation: the fill pipeline's destination
// (device memory) in the daemon.
type Sink interface {
	// Prepare is called once, before any byte, with the offer (it
	// allocates the arenas).
	Prepare(ctx context.Context, offer Offer) error
	// WriteAt stores p at off of arena. It is called from several
	// goroutines at once, for disjoint ranges.
	WriteAt(arena int, p []byte, off uint64) error
	// Commit is called once every byte arrived and every arena's digest
	// was checked: only now may the sink serve the bytes.
	Commit(ctx context.Context) error
	// Abort is called instead of Commit on any failure after Prepare
	// (cause says which); the sink frees what it allocated and serves
	// nothing.
	Abort(cause error)
}
