package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon/registry"
	"github.com/wcache/wcache/internal/defaults"
)

// EvictSelector names the generations an evict frees (the client's type).
type EvictSelector = client.EvictSelector

// EvictResult is what an evict freed (the client's type).
type EvictResult = client.EvictResult

// Evict frees the generations sel names and leaves the daemon running with
// the others (empty when none is left), ready for the next Publish. It
// drains as Stop without force does, but only their leases: each gets a
// KIND_DRAINING notice and Evict waits up to timeout (0: DrainTimeout)
// for them to go, while attaches to them are refused (UNAVAILABLE) and the
// other generations serve on. Memory is never freed under a live lease:
// when leases remain it returns a *DrainTimeoutError and they serve on. A
// daemon holding nothing is evicted at once (zero result); a selector
// naming none of several, or nothing held, is a *SelectError; a named
// generation being published, or a daemon that is stopping, a
// *PublishConflictError.
func (d *Daemon) Evict(ctx context.Context, sel EvictSelector, timeout time.Duration) (EvictResult, error) {
	gens, err := d.reg.SelectForEvict(sel)
	if err != nil || len(gens) == 0 {
		return EvictResult{}, err
	}
	defaults.Positive(&timeout, d.opts.DrainTimeout)
	deadline := time.Now().Add(timeout)
	notice := drainNotice(deadline, fmt.Sprintf("daemon of %s evicts the weights of this lease: release it within %s",
		d.info.DeviceUUID, timeout))
	res, ok := d.reg.BeginEvict(gens, notice)
	if !ok {
		return res, &PublishConflictError{Reason: ConflictBusy, State: StateStopping}
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if !d.reg.WaitEmpty(wctx, gens) {
		left := leaseInfos(d.reg.LeasesOf(gens))
		d.reg.EndEvict(gens, false)
		return res, &DrainTimeoutError{Timeout: timeout.String(), Leases: left}
	}
	// No lease of gens is left and none can begin (draining): free, then
	// forget them, so that a publish never allocates next to the old
	// weights (allocMu).
	d.allocMu.Lock()
	freed, ok := d.reg.EndEvict(gens, true)
	if !ok {
		d.allocMu.Unlock()
		return res, &PublishConflictError{Reason: ConflictBusy, State: StateStopping}
	}
	for _, g := range freed {
		d.freeAllocs(g.Allocs)
		if g.Manifest != nil {
			g.Manifest.files.close()
		}
		res.Freed += g.Load.Bytes
		res.Generations = append(res.Generations, g.ID)
	}
	d.allocMu.Unlock()
	d.reportHeld()
	if d.State() == StateEmpty {
		d.metrics.Loaded(LoadStats{}, 0) // nothing loaded any more
	}
	if err := d.rewriteReady(); err != nil {
		d.log.Warn("rewriting the ready file after an evict", "error", err)
	}
	d.log.Info("evicted", "generations", res.Generations, "bytes_freed", res.Freed, "leases_at_evict", res.Leases,
		"generations_left", d.reg.Count())
	return res, nil
}

// Evict is the Evict RPC: Daemon.Evict, for the peers the authorization
// table lets evict (authz.go, enforced by the interceptor).
func (s *service) Evict(ctx context.Context, req *daemonv1.EvictRequest) (*daemonv1.EvictResponse, error) {
	timeout := min(time.Duration(req.GetTimeoutMs())*time.Millisecond, MaxStopTimeout)
	sel := EvictSelector{Model: req.GetModel(), ConfigDigest: req.GetConfigDigest(), Generation: req.GetGeneration(), All: req.GetAll()}
	res, err := s.d.Evict(ctx, sel, timeout)
	var dte *DrainTimeoutError
	var ce *PublishConflictError
	var se *SelectError
	switch {
	case errors.As(err, &dte):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case errors.As(err, &ce):
		return nil, conflictStatus(err)
	case errors.As(err, &se):
		code := codes.FailedPrecondition
		if registry.Named(se.Selector) {
			code = codes.NotFound
		}
		return nil, status.Error(code, err.Error())
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &daemonv1.EvictResponse{LeasesAtEvict: uint32(res.Leases), BytesFreed: res.Freed, Generations: res.Generations}, nil
}
