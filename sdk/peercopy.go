package sdk

import (
	"context"
	"time"
)

// PeerCopyRequest asks a backend to fill a new allocation from memory
// another process exported: a sibling daemon's arena on the same node
// (peer fill, docs/peer-fill.md).
type PeerCopyRequest struct {
	// Ordinal is the destination device, as this process sees it.
	Ordinal int
	// Source is the handle the sibling exported (its Export, the handle
	// the sibling's daemon already hands its clients). Borrowed for the
	// call: a backend imports it, copies, and unmaps it before returning;
	// a descriptor handle's File stays the caller's.
	Source Handle
	// Length is how many bytes to copy from offset 0 of the source into
	// offset 0 of the new allocation; 0 copies Source.Size. More than
	// Source.Size is ErrInvalidArgument.
	Length uint64
}

// PeerCopyStats are the counters of one peer copy (sdk/fill.CopyDevice).
type PeerCopyStats struct {
	// Bytes copied and chunks queued.
	Bytes  uint64
	Chunks uint64
	// Streams is how many copy streams ran side by side.
	Streams int
	// Wall is the time from the first copy queued to the last completed.
	Wall time.Duration
	// Path says how the bytes moved: "p2p" (device to device over
	// NVLink/PCIe), "staged" (through host memory: no P2P path between
	// the devices), "memcpy" (the mock); "" when not reported.
	Path string
}

// PeerCopyResult is the new allocation a peer copy filled.
type PeerCopyResult struct {
	// ID is the new allocation (Free it as any other); Bytes is what it
	// reserved (>= the bytes copied).
	ID    AllocationID
	Bytes uint64
	Stats PeerCopyStats
}

// PeerCopier is the optional part of the contract a backend implements to
// fill from a sibling's memory. PeerCopy imports req.Source, allocates a
// new allocation of the bytes to copy on req.Ordinal, copies device to
// device through the sdk/fill copy engine (chunks on several streams:
// cuMemcpyPeerAsync or a DtoD copy with peer access, staged through host
// memory when the two devices have no P2P path; hipMemcpyPeerAsync; a
// memcpy for the mock), waits for every copy, and unmaps the source.
//
// Failure leaves nothing behind: on any error (an import the backend
// refuses, ErrOutOfMemory, a copy error, ctx's end) the new allocation is
// freed and the source unmapped before PeerCopy returns; no id is handed
// out. The source's memory is only ever read. Progress is reported from
// the calling goroutine, at most every chunk.
//
// A backend that does not implement it — and a plugin built before it —
// answers ErrUnsupported through PeerCopy, on which a daemon falls back to
// the files.
type PeerCopier interface {
	PeerCopy(ctx context.Context, req PeerCopyRequest, progress ProgressFunc) (PeerCopyResult, error)
}

// PeerCopy calls b.PeerCopy when b is a PeerCopier and answers
// ErrUnsupported otherwise.
func PeerCopy(ctx context.Context, b Backend, req PeerCopyRequest, progress ProgressFunc) (PeerCopyResult, error) {
	if pc, ok := b.(PeerCopier); ok {
		return pc.PeerCopy(ctx, req, progress)
	}
	return PeerCopyResult{}, Errorf(ErrUnsupported, "peer copy: this backend cannot copy from a peer's memory")
}
