package backendtest

import (
	"context"
	"errors"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// peerCopy runs sdk.PeerCopy and skips the test when the backend does not
// implement peer copies (ErrUnsupported: the optional part of the
// contract).
func (s *suite) peerCopy(t *testing.T, b sdk.Backend, req sdk.PeerCopyRequest, progress sdk.ProgressFunc) (sdk.PeerCopyResult, error) {
	t.Helper()
	res, err := sdk.PeerCopy(s.ctx(t), b, req, progress)
	if errors.Is(err, sdk.ErrUnsupported) {
		t.Skipf("the backend does not copy from a peer: %v", err)
	}
	if err == nil {
		t.Cleanup(func() {
			if err := b.Free(context.Background(), res.ID); err != nil && !errors.Is(err, sdk.ErrNoSuchAllocation) {
				t.Errorf("cleanup Free(%d): %v", res.ID, err)
			}
		})
	}
	return res, err
}

// freeMemory is the FreeMemory of the suite's device (FreeMemory).
func (s *suite) freeMemory(t *testing.T, b sdk.Backend) uint64 {
	t.Helper()
	return FreeMemory(t, b, s.opts.Ordinal)
}

// exportLoaded loads a layout into a new instance (another process, for a
// plugin), exports it and returns the exporter, the allocation, the
// handle and the digest of the whole allocation.
func (s *suite) exportLoaded(t *testing.T, l layout) (sdk.Backend, sdk.AllocationID, sdk.Handle, [32]byte) {
	t.Helper()
	exporter := s.newBackend(t)
	id := s.load(t, exporter, l, nil)
	h, err := exporter.Export(s.ctx(t), id)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	if h.File != nil {
		t.Cleanup(func() { h.File.Close() })
	}
	sums, err := exporter.Digest(s.ctx(t), id, []sdk.Range{{Offset: 0, Length: h.Size}})
	if err != nil {
		t.Fatalf("Digest: %v", err)
	}
	return exporter, id, h, sums[0]
}

// testPeerCopy: a second instance copies the first's exported allocation
// into a new allocation of its own; the bytes are equal, the source is
// untouched, progress is monotonic and complete, and freeing the copy
// gives its memory back.
func (s *suite) testPeerCopy(t *testing.T) {
	l := newLayout(t)
	exporter, id, h, before := s.exportLoaded(t, l)
	copier := s.newBackend(t)
	free := s.freeMemory(t, copier)
	var seen [][2]uint64
	res, err := s.peerCopy(t, copier, sdk.PeerCopyRequest{Ordinal: s.opts.Ordinal, Source: h},
		func(done, total uint64) { seen = append(seen, [2]uint64{done, total}) })
	if err != nil {
		t.Fatalf("PeerCopy: %v", err)
	}
	if res.Bytes < h.Size || res.Stats.Bytes != h.Size {
		t.Errorf("PeerCopy of %d bytes reserved %d and copied %d", h.Size, res.Bytes, res.Stats.Bytes)
	}
	s.verify(t, copier, res.ID, l)
	got, err := copier.Digest(s.ctx(t), res.ID, []sdk.Range{{Offset: 0, Length: h.Size}})
	if err != nil {
		t.Fatalf("Digest of the copy: %v", err)
	}
	if got[0] != before {
		t.Errorf("the copy's digest of all %d bytes differs from the source's", h.Size)
	}
	for i, p := range seen {
		if p[1] != h.Size || p[0] > p[1] || (i > 0 && p[0] < seen[i-1][0]) {
			t.Fatalf("progress %v", seen)
		}
	}
	// The source is untouched and still served by its owner.
	s.verify(t, exporter, id, l)
	after, err := exporter.Digest(s.ctx(t), id, []sdk.Range{{Offset: 0, Length: h.Size}})
	if err != nil || after[0] != before {
		t.Errorf("the source changed during the copy (%v)", err)
	}
	if err := copier.Free(s.ctx(t), res.ID); err != nil {
		t.Fatalf("Free of the copy: %v", err)
	}
	if now := s.freeMemory(t, copier); now != free {
		t.Errorf("free memory %d after Free of the copy, %d before it", now, free)
	}
}

// testPeerCopyTooLong: a length past the source is ErrInvalidArgument and
// leaves nothing allocated.
func (s *suite) testPeerCopyTooLong(t *testing.T) {
	l := newLayout(t)
	_, _, h, _ := s.exportLoaded(t, l)
	copier := s.newBackend(t)
	free := s.freeMemory(t, copier)
	_, err := s.peerCopy(t, copier, sdk.PeerCopyRequest{Ordinal: s.opts.Ordinal, Source: h, Length: h.Size + 1}, nil)
	wantKind(t, "PeerCopy past the source's end", err, sdk.ErrInvalidArgument)
	if now := s.freeMemory(t, copier); now != free {
		t.Errorf("free memory %d after a refused PeerCopy, %d before it", now, free)
	}
	s.assertUsable(t, copier)
}
