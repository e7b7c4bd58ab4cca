package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// EvictSelector names the generations an evict frees (a daemon holds
// several: a target and a draft model, co-located models): those whose
// model (directory or config model), config digest and generation id —
// each when set — are the given ones, or with All every one. The zero
// selector names the daemon's only generation; a daemon holding several
// refuses it (FAILED_PRECONDITION naming them).
type EvictSelector struct {
	Model        string
	ConfigDigest string
	Generation   uint64
	All          bool
}

// String says what s names ("every generation", "model m, config digest d").
func (s EvictSelector) String() string {
	if s.All {
		return "every generation"
	}
	var parts []string
	if s.Model != "" {
		parts = append(parts, "model "+s.Model)
	}
	if s.ConfigDigest != "" {
		parts = append(parts, "config digest "+s.ConfigDigest)
	}
	if s.Generation != 0 {
		parts = append(parts, fmt.Sprintf("generation %d", s.Generation))
	}
	if len(parts) == 0 {
		return "the only generation"
	}
	return strings.Join(parts, ", ")
}

// EvictResult is what an evict freed: the leases its generations had when
// it began, their tensor bytes and their ids.
type EvictResult struct {
	Leases      int
	Freed       uint64
	Generations []uint64
}

// Evict asks the daemon to drop its only generation and stay up:
// EvictSelected with the zero EvictSelector (a daemon holding several
// refuses it).
func (c *Client) Evict(ctx context.Context, timeout time.Duration) (leases int, freed uint64, err error) {
	r, err := c.EvictSelected(ctx, EvictSelector{}, timeout)
	if err != nil {
		return 0, 0, err
	}
	return r.Leases, r.Freed, nil
}

// EvictSelected asks the daemon to drop the generations sel names and stay
// up with the others. The daemon notifies their leases and waits up to
// timeout (0: its drain timeout) for them, while the other generations
// serve on; memory is never freed under a live lease, so when leases remain
// it answers FAILED_PRECONDITION naming them and they serve on. ctx must
// outlast timeout. A named generation being published is a
// *PublishConflictError (ErrPublishInProgress); a selector that names no
// generation is NOT_FOUND. An empty daemon is evicted at once (zero result).
func (c *Client) EvictSelected(ctx context.Context, sel EvictSelector, timeout time.Duration) (*EvictResult, error) {
	r, err := c.rpc.Evict(ctx, &daemonv1.EvictRequest{TimeoutMs: uint64(timeout.Milliseconds()),
		Model: sel.Model, ConfigDigest: sel.ConfigDigest, Generation: sel.Generation, All: sel.All})
	if err != nil {
		if pe, ok := c.publishError(err).(*PublishConflictError); ok {
			return nil, pe
		}
		return nil, fmt.Errorf("evict %s from %s: %w", sel, c.socket, err)
	}
	return &EvictResult{Leases: int(r.GetLeasesAtEvict()), Freed: r.GetBytesFreed(), Generations: r.GetGenerations()}, nil
}
