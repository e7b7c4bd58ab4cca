// Package devthread runs a GPU device's driver calls on one OS thread.
//
// Vendor runtimes keep per-thread state (the current CUDA context, the
// current HIP device), and Go moves goroutines between threads. A Thread is
// one goroutine locked to its OS thread for its whole life: setup runs
// there first (retain and make current a context, hipSetDevice), then every
// closure handed to Do or Submit, then cleanup at Stop. The goroutine never
// unlocks, so when it returns the Go runtime ends the thread and with it
// the thread's driver state. The CUDA and ROCm backends use it.
package devthread

import (
	"context"
	"fmt"
	"runtime"

	"github.com/wcache/wcache/sdk"
)

// ErrStopped is returned for work sent to a stopped Thread.
var ErrStopped = fmt.Errorf("device worker stopped (backend closed): %w", sdk.ErrUnavailable)

// Thread is one locked OS thread serving closures. Create it with Start.
type Thread struct {
	cleanup func() error
	jobs    chan job
	quit    chan struct{}
	done    chan struct{} // closed when the goroutine has cleaned up
	stopErr error         // cleanup's error; read after done
}

type job struct {
	fn  func() error
	res chan error
}

// Start starts the thread, runs setup on it and waits for setup's result.
// When setup fails the thread ends and the error is returned (cleanup does
// not run: setup undoes its own partial work). cleanup, which may be nil,
// runs on the thread when Stop is called.
func Start(setup, cleanup func() error) (*Thread, error) {
	t := &Thread{cleanup: cleanup, jobs: make(chan job), quit: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan error, 1)
	go t.run(setup, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Thread) run(setup func() error, ready chan<- error) {
	runtime.LockOSThread() // never unlocked: see the package doc
	defer close(t.done)
	if setup != nil {
		if err := setup(); err != nil {
			ready <- err
			return
		}
	}
	ready <- nil
	for {
		select {
		case j := <-t.jobs:
			j.res <- j.fn()
		case <-t.quit:
			if t.cleanup != nil {
				t.stopErr = t.cleanup()
			}
			return
		}
	}
}

// Submit hands fn to the thread and returns a channel that receives its
// result. If ctx ends or the thread stops before the thread takes fn, the
// channel receives that error (ErrStopped) and fn never runs; once taken,
// fn runs to completion whatever ctx does.
func (t *Thread) Submit(ctx context.Context, fn func() error) <-chan error {
	res := make(chan error, 1)
	select {
	case t.jobs <- job{fn: fn, res: res}:
	case <-ctx.Done():
		res <- ctx.Err()
	case <-t.quit:
		res <- ErrStopped
	}
	return res
}

// Do runs fn on the thread and returns its result (see Submit).
func (t *Thread) Do(ctx context.Context, fn func() error) error {
	return <-t.Submit(ctx, fn)
}

// Stop ends the thread after the closure in progress, runs cleanup on it
// and returns cleanup's error. It is idempotent; later calls return the
// same error. Stop must not be called from the thread itself.
func (t *Thread) Stop() error {
	select {
	case <-t.quit:
	default:
		close(t.quit)
	}
	<-t.done
	return t.stopErr
}
