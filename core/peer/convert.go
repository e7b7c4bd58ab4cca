package peer

import (
	"errors"

	peerv1 "github.com/wcache/wcache/proto/wcache/peer/v1"
)

func offerToProto(o Offer) *peerv1.Offer {
	out := &peerv1.Offer{Identity: o.Identity, Generation: o.Generation, Arenas: make([]*peerv1.Arena, len(o.Arenas))}
	for i, a := range o.Arenas {
		out.Arenas[i] = &peerv1.Arena{Size: a.Size, Digest: a.Digest}
	}
	return out
}

func offerFromProto(p *peerv1.Offer) Offer {
	out := Offer{Identity: p.GetIdentity(), Generation: p.GetGeneration(), Arenas: make([]Arena, len(p.GetArenas()))}
	for i, a := range p.GetArenas() {
		out.Arenas[i] = Arena{Size: a.GetSize(), Digest: a.GetDigest()}
	}
	return out
}

// errorToProto maps an error to its wire code (a kind not listed is
// CODE_INTERNAL).
func errorToProto(err error) *peerv1.Error {
	code := peerv1.Error_CODE_INTERNAL
	switch {
	case errors.Is(err, ErrNotHeld):
		code = peerv1.Error_CODE_NOT_HELD
	case errors.Is(err, ErrGenerationChanged):
		code = peerv1.Error_CODE_GENERATION_CHANGED
	case errors.Is(err, ErrInvalid):
		code = peerv1.Error_CODE_INVALID
	case errors.Is(err, ErrBusy):
		code = peerv1.Error_CODE_BUSY
	}
	return &peerv1.Error{Code: code, Message: err.Error()}
}

// errorFromProto rebuilds a peer's error as a *RemoteError.
func errorFromProto(peer string, e *peerv1.Error) error {
	kind := ErrInvalid
	switch e.GetCode() {
	case peerv1.Error_CODE_NOT_HELD:
		kind = ErrNotHeld
	case peerv1.Error_CODE_GENERATION_CHANGED:
		kind = ErrGenerationChanged
	case peerv1.Error_CODE_BUSY:
		kind = ErrBusy
	case peerv1.Error_CODE_INTERNAL:
		kind = errInternal
	}
	return &RemoteError{Peer: peer, Kind: kind, Message: e.GetMessage()}
}
