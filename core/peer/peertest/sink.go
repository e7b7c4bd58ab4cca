package peertest

import (
	"context"
	"errors"
	"sync"

	"github.com/wcache/wcache/core/peer"
)

// MemSink is a peer.Sink that keeps the fetched arenas in memory and
// records what Fetch did with it. Read its state through the methods,
// which are safe while a fetch runs.
type MemSink struct {
	mu        sync.Mutex
	arenas    [][]byte
	prepared  bool
	committed bool
	aborted   error
}

var _ peer.Sink = (*MemSink)(nil)

// Prepare allocates the offer's arenas; a second Prepare is an error.
func (s *MemSink) Prepare(_ context.Context, o peer.Offer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prepared {
		return errors.New("peertest: sink prepared twice")
	}
	s.prepared = true
	for _, a := range o.Arenas {
		s.arenas = append(s.arenas, make([]byte, a.Size))
	}
	return nil
}

// WriteAt copies p into arena at off (Fetch checked the range against
// the offer; a range outside is an error here too).
func (s *MemSink) WriteAt(arena int, p []byte, off uint64) error {
	s.mu.Lock()
	a := s.arenas
	s.mu.Unlock()
	if arena < 0 || arena >= len(a) || off > uint64(len(a[arena])) || uint64(len(p)) > uint64(len(a[arena]))-off {
		return errors.New("peertest: write outside the prepared arenas")
	}
	copy(a[arena][off:], p)
	return nil
}

// Commit records the commit.
func (s *MemSink) Commit(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.committed = true
	return nil
}

// Abort records the cause.
func (s *MemSink) Abort(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aborted = cause
}

// Prepared reports whether Prepare was called.
func (s *MemSink) Prepared() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prepared
}

// Committed reports whether Commit was called.
func (s *MemSink) Committed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed
}

// Aborted is the cause Abort was given (nil: not aborted).
func (s *MemSink) Aborted() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aborted
}

// Arena is the bytes received for arena i (nil before Prepare).
func (s *MemSink) Arena(i int) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < 0 || i >= len(s.arenas) {
		return nil
	}
	return s.arenas[i]
}
