package daemon

import (
	"context"
	"errors"
	"os"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon/registry"
)

// maxClientNameLen bounds the client name a lease records.
const maxClientNameLen = 256

// LeaseInfo describes one attached client: the type the client reports
// in Status, so one declaration serves both sides.
type LeaseInfo = client.LeaseInfo

// Leases lists the attached clients, oldest first.
func (d *Daemon) Leases() []LeaseInfo { return d.leaseInfos() }

func (d *Daemon) leaseInfos() []LeaseInfo { return leaseInfos(d.reg.List()) }

// leaseInfos describes ls.
func leaseInfos(ls []*lease) []LeaseInfo {
	out := make([]LeaseInfo, len(ls))
	for i, l := range ls {
		out[i] = LeaseInfo{ID: l.ID, PID: l.Peer.PID, UID: l.Peer.UID, ClientName: l.ClientName, Since: l.Since}
	}
	return out
}

// service implements daemonv1.DaemonServer.
type service struct {
	daemonv1.UnimplementedDaemonServer
	d *Daemon
}

// Status describes the daemon.
func (s *service) Status(context.Context, *daemonv1.StatusRequest) (*daemonv1.StatusResponse, error) {
	return s.d.statusProto(), nil
}

// openFDs counts this process's open descriptors (0 when unknown).
func openFDs() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(entries) - 1 // the directory being read
}

// Attach checks the config, sends the manifest and holds the lease until the
// stream ends. The outcome up to the manifest goes to the daemon's Metrics.
func (s *service) Attach(req *daemonv1.AttachRequest, stream daemonv1.Daemon_AttachServer) error {
	d := s.d
	begin := time.Now()
	ctx := stream.Context()
	if req.GetConfig() == nil {
		d.metrics.AttachFailed(AttachOther)
		return status.Error(codes.InvalidArgument, "attach request carries no config")
	}
	p, _ := peerFrom(ctx)
	name := req.GetClientName()
	if len(name) > maxClientNameLen {
		name = name[:maxClientNameLen]
	}
	cfg := cacheconfig.FromProto(req.GetConfig())
	// A client that sent op ATTACH_WAIT first gets the lease's descriptors
	// on that request (attachwait.go); every way out below resolves it.
	wait := d.attachWaits.begin(req.GetFdWaitToken())
	defer wait.resolve(nil, "the attach failed")
	l, reason, err := d.attachLease(cfg, req.GetHandleKinds(), req.GetContent(), p, name)
	if (reason == AttachEmpty || reason == AttachConfigMismatch) && d.fillForAttach(ctx, cfg, p) {
		// Filled from a sibling daemon's publication (attachfill.go).
		l, reason, err = d.attachLease(cfg, req.GetHandleKinds(), req.GetContent(), p, name)
	}
	if err != nil {
		d.metrics.AttachFailed(reason)
		return err
	}
	defer d.reg.Remove(l)
	d.log.Debug("lease begins", "lease", l.ID, "generation", l.Gen.ID, "pid", p.PID, "uid", p.UID, "client", name)
	ev, err := l.Manifest.leaseEvent(l.ID, l.Token[:], req.GetTensorTable())
	if err != nil {
		d.metrics.AttachFailed(AttachOther)
		return status.Errorf(codes.Internal, "daemon of %s: %v", d.info.DeviceUUID, err)
	}
	wait.resolve(l, "")
	if err := stream.SendMsg(ev); err != nil {
		d.metrics.AttachFailed(AttachOther)
		return err
	}
	d.metrics.Attached(time.Since(begin))
	for {
		select {
		case <-ctx.Done():
			d.log.Debug("lease ends", "lease", l.ID)
			return status.FromContextError(ctx.Err()).Err()
		case <-l.Ended:
			return l.EndErr
		case n := <-l.Notices:
			if err := stream.Send(&daemonv1.AttachEvent{Event: &daemonv1.AttachEvent_Notice{Notice: n}}); err != nil {
				return err
			}
		}
	}
}

// attachLease registers a lease on the serving generation whose config
// matches cfg and which takes the attach (registry.MatchAttach). Otherwise:
// a daemon that stops or drains, or a matching generation that drains, is
// UNAVAILABLE with a BUSY detail; a matching generation being published,
// or a daemon that serves nothing, NOT_FOUND with a NoWeights detail; else
// FAILED_PRECONDITION with the ConfigMismatch of the nearest serving
// generation (fewest differing fields). A matching generation whose
// content policy refuses the proof is passed over for the next matching
// one; when none takes the attach, the first refusal is the answer
// (FAILED_PRECONDITION with a ContentRefused detail, contentProofStatus,
// or the handle kinds').
func (d *Daemon) attachLease(cfg cacheconfig.Config, kinds []string, proof *daemonv1.ContentProof, p PeerInfo, name string) (*lease, AttachFailure, error) {
	return registry.MatchAttach(d.reg, cfg, procOf(p), name, registry.AttachAnswers[*manifest, *handleFiles, AttachFailure]{
		Accept: func(g *generation) (AttachFailure, error) {
			if err := handleKindsStatus(d.info.DeviceUUID, d.info.Backend, g.Manifest, kinds); err != nil {
				return AttachOther, err
			}
			return AttachContentRefused, contentProofStatus(g, proof, p)
		},
		Busy: func(st State) (AttachFailure, error) { return AttachDraining, busyStatus(d.info.DeviceUUID, st) },
		Empty: func(st State, pid int32) (AttachFailure, error) {
			return AttachEmpty, noWeightsStatus(d.info.DeviceUUID, st, pid)
		},
		Mismatch: func(diffs []cacheconfig.FieldDiff, nearest *generation, compared int) (AttachFailure, error) {
			return AttachConfigMismatch, generationMismatchStatus(diffs, nearest, compared)
		},
	})
}

// Stop drains or forces, as Daemon.Stop.
func (s *service) Stop(ctx context.Context, req *daemonv1.StopRequest) (*daemonv1.StopResponse, error) {
	timeout := time.Duration(req.GetTimeoutMs()) * time.Millisecond
	if timeout > MaxStopTimeout {
		timeout = MaxStopTimeout
	}
	n, err := s.d.Stop(ctx, req.GetForce(), timeout)
	var dte *DrainTimeoutError
	switch {
	case errors.As(err, &dte):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &daemonv1.StopResponse{LeasesAtStop: uint32(n)}, nil
}
