package fill

import "context"

// Copier is what a backend supplies to Fill: lanes of staging buffers
// with an asynchronous copy out of them into one destination (an
// allocation). A Copier is typically made per Load, bound to its
// destination, and draws its lanes from a per-device pool.
type Copier interface {
	// Acquire returns a lane with buffers staging buffers of at least
	// size bytes each. Fill calls it from a reader goroutine locked to
	// its OS thread and makes every call on the lane, Release included,
	// from that goroutine. It may block until a lane is free; it must
	// return ctx's error when ctx ends first.
	Acquire(ctx context.Context, buffers, size int) (Lane, error)
}

// Lane is one reader's ring of staging buffers and its copy queue (a CUDA
// stream and one event per buffer).
type Lane interface {
	// Buffer returns staging buffer i (0 <= i < the count asked of
	// Acquire). Fill reads into it only while no copy out of it is
	// outstanding.
	Buffer(i int) []byte
	// CopyAsync queues a copy of Buffer(i)[off:off+n] to offset dst of
	// the destination and returns a Completion that Fill waits on before
	// it writes into buffer i again. A synchronous copier does the copy
	// here and returns Done(nil) or Done(err).
	CopyAsync(i, off, n int, dst uint64) (Completion, error)
	// Release gives the lane back once every Completion of it has been
	// waited for. failed is the first error the lane saw (a failed copy
	// or wait), nil when it worked: a Copier may then discard the lane
	// rather than reuse it.
	Release(failed error)
}

// Completion is a queued copy.
type Completion interface {
	// Wait blocks until the copy has completed and returns its error.
	// Fill calls it once.
	Wait() error
}

// Done returns a Completion that has already completed with err, for
// synchronous copiers.
func Done(err error) Completion { return done{err} }

type done struct{ err error }

func (d done) Wait() error { return d.err }
