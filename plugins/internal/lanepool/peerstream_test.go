package lanepool

import (
	"errors"
	"testing"

	"github.com/wcache/wcache/plugins/internal/gpucore"
)

// A peer stream binds, queues the vendor's copy on its stream and records
// the slot's event after it; Close frees the stream and events and
// unbinds, also after a refused copy.
func TestPeerStreamCopiesRecordsAndFrees(t *testing.T) {
	api := &fakeStreams{}
	bound := 0
	var copies [][3]uint64
	refuse := false
	s, err := NewPeerStream[int, fakeBuffer, int](api,
		func() error { bound++; return nil }, func() error { bound--; return nil },
		func(dst, src gpucore.Ptr, n uint64, stream int) error {
			if refuse {
				return errors.New("no P2P path")
			}
			copies = append(copies, [3]uint64{uint64(dst), uint64(src), n})
			return nil
		}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if bound != 1 || api.streams != 1 || api.events != 2 {
		t.Fatalf("bound %d, %d streams, %d events; want 1, 1, 2", bound, api.streams, api.events)
	}
	done, err := s.CopyAsync(1, 100, 200, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := done.Wait(); err != nil || api.recorded != 1 || api.synchronised != 1 || len(copies) != 1 || copies[0] != [3]uint64{100, 200, 8} {
		t.Fatalf("Wait = %v; %d records, %d synchronisations, copies %v", err, api.recorded, api.synchronised, copies)
	}
	refuse = true
	if _, err := s.CopyAsync(0, 0, 0, 8); err == nil || api.recorded != 1 {
		t.Fatalf("a refused copy = %v after %d records; want its error and no event recorded", err, api.recorded)
	}
	if err := s.Close(); err != nil || bound != 0 || api.streams != 0 || api.events != 0 {
		t.Fatalf("Close = %v: bound %d, %d streams, %d events left", err, bound, api.streams, api.events)
	}
}
