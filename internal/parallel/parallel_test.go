package parallel

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// TestForCallsEveryStepOnce: every step runs exactly once, on no more
// goroutines than asked, whatever the counts.
func TestForCallsEveryStepOnce(t *testing.T) {
	for _, c := range []struct{ n, workers int }{{0, 4}, {1, 4}, {100, 1}, {100, 3}, {7, 0}} {
		calls := make([]atomic.Int32, c.n)
		var maxW atomic.Int32
		err := For(context.Background(), c.n, c.workers, func(w, i int) error {
			calls[i].Add(1)
			for cur := maxW.Load(); int32(w) > cur && !maxW.CompareAndSwap(cur, int32(w)); cur = maxW.Load() {
			}
			return nil
		})
		if err != nil {
			t.Fatalf("n=%d workers=%d: %v", c.n, c.workers, err)
		}
		for i := range calls {
			if got := calls[i].Load(); got != 1 {
				t.Errorf("n=%d workers=%d: step %d ran %d times", c.n, c.workers, i, got)
			}
		}
		if c.n > 0 && int(maxW.Load()) >= max(c.workers, 1) {
			t.Errorf("n=%d workers=%d: goroutine %d", c.n, c.workers, maxW.Load())
		}
	}
}

// TestForStopsAtTheFirstError: an error ends the job with that error and
// no step starts after it; an ended ctx ends it with its cause.
func TestForStopsAtTheFirstError(t *testing.T) {
	boom := errors.New("boom")
	var after atomic.Int32
	var failed atomic.Bool
	err := For(context.Background(), 1000, 1, func(_, i int) error {
		if failed.Load() {
			after.Add(1)
		}
		if i == 10 {
			failed.Store(true)
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || after.Load() != 0 {
		t.Errorf("For = %v with %d steps after the error; want boom and none", err, after.Load())
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stopped")
	var ran atomic.Int32
	err = For(ctx, 1000, 2, func(_, i int) error {
		if ran.Add(1) == 5 {
			cancel(stop)
		}
		return nil
	})
	if !errors.Is(err, stop) || ran.Load() >= 1000 {
		t.Errorf("For with ctx ended = %v after %d steps; want its cause, early", err, ran.Load())
	}
}
