package daemon

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
)

// TestDescriptorChannelUnderConcurrentAttaches: 64 clients attach and
// release memfd leases in a loop (a bounded number of attaches in all);
// every attach receives its descriptors. It loads the channel's close
// order: Linux answers a non-blocking SOCK_SEQPACKET read with EOF when
// the peer shut down between the read's queue check and its shutdown
// check, although the peer's last message was queued meanwhile, so the
// daemon closes after the client (awaitPeerClose) and fdpass.Recv reads
// again after EOF. That window is a few instructions wide: the test checks
// that every attach gets its descriptors under load, it cannot force the
// race. WCACHE_TEST_FD_STRESS raises the count (default 3,000; the test
// clears nothing else it reads).
func TestDescriptorChannelUnderConcurrentAttaches(t *testing.T) {
	if testing.Short() {
		t.Skip("stress")
	}
	total := 3000
	if v, err := strconv.Atoi(os.Getenv("WCACHE_TEST_FD_STRESS")); err == nil && v > 0 {
		total = v
	}
	f := newFixture(t)
	f.memfd = true
	r := f.start(0, nil)
	cfg := r.d.Info().Config
	sock := r.d.Info().Paths.Socket
	const clients = 64
	var left atomic.Int64
	left.Store(int64(total))
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			c, err := client.Dial(context.Background(), client.BySocket(sock), client.Options{ClientName: fmt.Sprintf("stress %d", i)})
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			defer c.Close()
			for left.Add(-1) >= 0 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				a, err := c.Attach(ctx, cfg)
				cancel()
				if err == nil {
					err = a.Lease.Close()
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i < 5 {
			t.Errorf("attach: %v", err)
		}
	}
	if len(errs) > 0 {
		t.Errorf("%d of %d attaches failed", len(errs), total)
	}
}
