package daemon

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
)

// Evict frees the weights and leaves the daemon running and empty, ready for
// the next Publish. It drains as Stop without force does: every lease gets
// a KIND_DRAINING notice and Evict waits up to timeout (0: DrainTimeout) for
// them to go. Memory is never freed under a live lease: when leases remain
// it returns a *DrainTimeoutError and the daemon keeps serving. An empty
// daemon is evicted at once (0 bytes); a publish in progress, or a daemon
// that is stopping, is a *PublishConflictError. It returns the number of
// leases when it began and the tensor bytes freed.
func (d *Daemon) Evict(ctx context.Context, timeout time.Duration) (leases int, freed uint64, err error) {
	switch st, pid := d.reg.stateAndPublisher(); st {
	case StateEmpty:
		return 0, 0, nil
	case StatePublishing:
		return 0, 0, &PublishConflictError{Reason: ConflictInProgress, State: st, PublisherPID: pid}
	case StateStopping:
		return 0, 0, &PublishConflictError{Reason: ConflictBusy, State: st}
	}
	n := len(d.reg.list())
	drained, err := d.drain(ctx, timeout, "evicts its weights")
	switch {
	case err != nil:
		return n, 0, err
	case !drained:
		return n, 0, &PublishConflictError{Reason: ConflictBusy, State: StateStopping}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reg.currentState() == StateStopping {
		d.reg.endEvict()
		return n, 0, &PublishConflictError{Reason: ConflictBusy, State: StateStopping}
	}
	// No lease is left and none can begin (draining): free, then say empty,
	// so that a publish never allocates next to the old weights.
	freed = d.info.Load.Bytes
	d.freeAllocs(d.allocs)
	if d.manifest != nil {
		d.manifest.files.close()
	}
	d.allocs, d.manifest, d.generation = nil, nil, 0
	d.config, d.configProto = cacheconfig.Config{}, d.emptyConfigProto()
	d.info.Model, d.info.Files, d.info.Config, d.info.ConfigDigest = "", nil, cacheconfig.Config{}, ""
	d.info.Tensors, d.info.Load = 0, LoadStats{}
	d.reg.endEvict()
	d.metrics.Loaded(LoadStats{}, 0) // nothing loaded any more
	if err := d.rewriteReady(); err != nil {
		d.log.Warn("rewriting the ready file after an evict", "error", err)
	}
	d.log.Info("evicted: the daemon is empty", "bytes_freed", freed, "leases_at_evict", n)
	return n, freed, nil
}

// Evict is the Evict RPC: Daemon.Evict for the daemon's uid and
// AllowUIDs peers.
func (s *service) Evict(ctx context.Context, req *daemonv1.EvictRequest) (*daemonv1.EvictResponse, error) {
	p, _ := peerFrom(ctx)
	if err := s.d.mayChangeWeights(p); err != nil {
		return nil, err
	}
	timeout := min(time.Duration(req.GetTimeoutMs())*time.Millisecond, MaxStopTimeout)
	n, freed, err := s.d.Evict(ctx, timeout)
	var dte *DrainTimeoutError
	var ce *PublishConflictError
	switch {
	case errors.As(err, &dte):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case errors.As(err, &ce):
		return nil, conflictStatus(err)
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &daemonv1.EvictResponse{LeasesAtEvict: uint32(n), BytesFreed: freed}, nil
}
