package client

import (
	"context"
	"fmt"
	"time"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// Evict asks the daemon to drop its weights and stay up, empty. The daemon
// notifies its leases and waits up to timeout (0: its drain timeout) for
// them; memory is never freed under a live lease, so when leases remain it
// answers FAILED_PRECONDITION naming them and keeps serving. ctx must
// outlast timeout. A publish in progress is a *PublishConflictError
// (ErrPublishInProgress). It returns the number of leases when the evict
// began and the tensor bytes freed (0 for a daemon that was already empty).
func (c *Client) Evict(ctx context.Context, timeout time.Duration) (leases int, freed uint64, err error) {
	r, err := c.rpc.Evict(ctx, &daemonv1.EvictRequest{TimeoutMs: uint64(timeout.Milliseconds())})
	if err != nil {
		if pe, ok := c.publishError(err).(*PublishConflictError); ok {
			return 0, 0, pe
		}
		return 0, 0, fmt.Errorf("evict %s: %w", c.socket, err)
	}
	return int(r.GetLeasesAtEvict()), r.GetBytesFreed(), nil
}
