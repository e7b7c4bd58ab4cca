// Package parallel runs the numbered steps of one job on several
// goroutines: hashing the leaves of a file or an arena, a batch of digest
// calls. It is a leaf: it imports nothing of the module.
package parallel

import (
	"context"
	"sync"
	"sync/atomic"
)

// For calls fn(w, i) once for every i in [0, n), on min(workers, n)
// goroutines (workers below 1 is 1), each taking the next i in turn; w
// (0 ≤ w < workers) names the goroutine, for buffers of its own. It
// returns when every call has returned. The first error of fn, or
// context.Cause(ctx) once ctx ends (checked before each step), stops the
// others before their next step and is For's result.
func For(ctx context.Context, n, workers int, fn func(w, i int) error) error {
	var (
		next  atomic.Int64
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		next.Store(int64(n)) // the others stop before their next step
	}
	for w := range min(max(workers, 1), n) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if ctx.Err() != nil {
					fail(context.Cause(ctx))
					return
				}
				if err := fn(w, int(i)); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}
