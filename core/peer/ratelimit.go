package peer

import (
	"context"
	"sync"
	"time"
)

// rateLimiter is a token bucket of bytes shared by every connection of a
// Server: at most rate bytes a second on average, bursts of up to burst.
type rateLimiter struct {
	rate  float64 // bytes per second
	burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newRateLimiter(bytesPerSec, burst uint64) *rateLimiter {
	return &rateLimiter{rate: float64(bytesPerSec), burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

// wait blocks until n bytes may be sent (n at most burst), or ctx ends.
func (r *rateLimiter) wait(ctx context.Context, n int) error {
	if r == nil {
		return nil
	}
	need := min(float64(n), r.burst)
	for {
		r.mu.Lock()
		now := time.Now()
		r.tokens = min(r.burst, r.tokens+now.Sub(r.last).Seconds()*r.rate)
		r.last = now
		if r.tokens >= need {
			r.tokens -= need
			r.mu.Unlock()
			return nil
		}
		delay := time.Duration((need - r.tokens) / r.rate * float64(time.Second))
		r.mu.Unlock()
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
