// Package poll waits for a condition by calling it at growing intervals:
// the one poll-until loop of the tree, for the product (a takeover waiting
// for the old daemon to exit) and for tests (Eventually), and Closed, the
// look at a done channel that does not wait. It is a leaf.
package poll

import (
	"context"
	"time"
)

// Intervals between calls: the first, doubling up to the longest.
const (
	FirstInterval   = 2 * time.Millisecond
	LongestInterval = 50 * time.Millisecond
)

// Until calls cond until it returns true (true, nil), timeout elapses
// (false, nil) or ctx ends (false, ctx.Err()). cond is called at once,
// then after FirstInterval, doubling up to LongestInterval, and once more
// at the deadline.
func Until(ctx context.Context, timeout time.Duration, cond func() bool) (bool, error) {
	deadline := time.Now().Add(timeout)
	interval := FirstInterval
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		if cond() {
			return true, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		timer.Reset(min(interval, left))
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-timer.C:
		}
		interval = min(interval*2, LongestInterval)
	}
}

// T is what Eventually needs of a *testing.T.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Eventually fails t with "waiting for <what>: not true after <timeout>"
// unless cond holds within timeout (see Until).
func Eventually(t T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if ok, _ := Until(context.Background(), timeout, cond); !ok {
		t.Fatalf("waiting for %s: not true after %s", what, timeout)
	}
}

// Closed reports, without waiting, whether ch is closed (a done or ended
// channel that is closed once and never sent on).
func Closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
