package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon/daemontest"
)

// The context given to Attach bounds the wait for the manifest, not the
// lease: a caller that cancels it as soon as Attach returns (a defer
// cancel() around the call) keeps its lease. The client once raced its
// "manifest received" signal against ctx.Done in one select, and lost
// about one lease in two when both were ready. That needs the watching
// goroutine to be scheduled late, so this test catches the old race only on
// a loaded machine (as TestMetricsSinkFollowsTheDaemon did, rarely); it
// states the contract.
func TestLeaseOutlivesTheAttachContext(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	const n = 20
	var leases []*client.Lease
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		a, err := client.Attach(ctx, client.BySocket(d.Socket()), d.Info().Config, client.Options{ClientName: t.Name()})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, a.Lease)
	}
	defer func() {
		for _, l := range leases {
			l.Close()
		}
	}()
	time.Sleep(200 * time.Millisecond)
	for i, l := range leases {
		select {
		case <-l.Done():
			t.Fatalf("lease %d of %d ended after its attach context was cancelled: %v", i+1, n, l.Err())
		default:
		}
	}
	if got := len(d.Leases()); got != n {
		t.Fatalf("daemon holds %d leases, want %d", got, n)
	}
}
