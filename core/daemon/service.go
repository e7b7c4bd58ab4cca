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
)

// maxClientNameLen bounds the client name a lease records.
const maxClientNameLen = 256

// LeaseInfo describes one attached client: the type the client reports
// in Status, so one declaration serves both sides.
type LeaseInfo = client.LeaseInfo

// Leases lists the attached clients, oldest first.
func (d *Daemon) Leases() []LeaseInfo { return d.leaseInfos() }

func (d *Daemon) leaseInfos() []LeaseInfo {
	ls := d.reg.list()
	out := make([]LeaseInfo, len(ls))
	for i, l := range ls {
		out[i] = LeaseInfo{ID: l.id, PID: l.peer.PID, UID: l.peer.UID, ClientName: l.clientName, Since: l.since}
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
	// What the daemon holds cannot change between the state check, the
	// comparison and the lease (a Publish or Evict takes d.mu to change it).
	d.mu.RLock()
	switch st, pid := d.reg.stateAndPublisher(); st {
	case StateEmpty, StatePublishing:
		d.mu.RUnlock()
		d.metrics.AttachFailed(AttachEmpty)
		return noWeightsStatus(d.info.DeviceUUID, st, pid)
	case StateDraining, StateStopping:
		// Before the comparison: weights on their way out are no answer to
		// "which config", and an engine of the next model must wait, not stop.
		d.mu.RUnlock()
		d.metrics.AttachFailed(AttachDraining)
		return busyStatus(d.info.DeviceUUID, st)
	}
	// A publication of a checkpoint as stored (wcache publish: source
	// files' content, no engine) is matched as a file load: its clients
	// prove their files against that content, which pins the model. An
	// engine's post-processed weights (engine_name set) are matched by
	// ComparePublished (model and stated dtype compared), whether or not
	// they carry their source files' content for clients to prove.
	compare := cacheconfig.Compare
	if d.manifest != nil && d.manifest.published && (len(d.manifest.content) == 0 || d.config.EngineName != "") {
		compare = cacheconfig.ComparePublished
	}
	if diffs := compare(d.config, cacheconfig.FromProto(req.GetConfig())); len(diffs) > 0 {
		d.mu.RUnlock()
		d.metrics.AttachFailed(AttachConfigMismatch)
		return mismatchStatus(diffs)
	}
	m := d.manifest
	if err := handleKindsStatus(d.info.DeviceUUID, d.info.Backend, m, req.GetHandleKinds()); err != nil {
		d.mu.RUnlock()
		d.metrics.AttachFailed(AttachOther)
		return err
	}
	p, _ := peerFrom(ctx)
	name := req.GetClientName()
	if len(name) > maxClientNameLen {
		name = name[:maxClientNameLen]
	}
	l, st := d.reg.add(p, name, time.Now(), m)
	d.mu.RUnlock()
	if l == nil {
		d.metrics.AttachFailed(AttachDraining)
		return busyStatus(d.info.DeviceUUID, st)
	}
	defer d.reg.remove(l)
	d.log.Debug("lease begins", "lease", l.id, "pid", p.PID, "uid", p.UID, "client", name)
	ev, err := m.leaseEvent(l.id, l.token[:], req.GetTensorTable())
	if err != nil {
		d.metrics.AttachFailed(AttachOther)
		return status.Errorf(codes.Internal, "daemon of %s: %v", d.info.DeviceUUID, err)
	}
	if err := stream.SendMsg(ev); err != nil {
		d.metrics.AttachFailed(AttachOther)
		return err
	}
	d.metrics.Attached(time.Since(begin))
	for {
		select {
		case <-ctx.Done():
			d.log.Debug("lease ends", "lease", l.id)
			return status.FromContextError(ctx.Err()).Err()
		case <-l.ended:
			return l.endErr
		case n := <-l.notices:
			if err := stream.Send(&daemonv1.AttachEvent{Event: &daemonv1.AttachEvent_Notice{Notice: n}}); err != nil {
				return err
			}
		}
	}
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
