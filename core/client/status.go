package client

import (
	"context"
	"fmt"
	"time"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
)

// LeaseInfo is one attached client as the daemon reports it.
type LeaseInfo struct {
	ID         uint64
	PID        int32
	UID        uint32
	ClientName string
	Since      time.Time
}

// Status describes a daemon.
type Status struct {
	PID             int
	DeviceUUID      string
	Backend         string
	Model           string
	Config          cacheconfig.Config
	ConfigDigest    string
	Bytes           uint64
	Tensors         int
	Generation      uint64
	Started         time.Time
	Leases          []LeaseInfo
	Version         string
	State           string // "empty", "publishing", "serving", "draining" or "stopping"
	ProtocolVersion uint32
	Goroutines      int
	OpenFDs         int
	// PublisherPID is the publishing client while State is "publishing".
	PublisherPID int32
	// Metadata is the metadata map of published weights.
	Metadata map[string]string
}

// Status asks the daemon to describe itself.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	r, err := c.rpc.Status(ctx, &daemonv1.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", c.socket, err)
	}
	s := &Status{PID: int(r.GetPid()), DeviceUUID: r.GetDeviceUuid(), Backend: r.GetBackend(), Model: r.GetModel(),
		ConfigDigest: r.GetConfigDigest(), Bytes: r.GetBytes(), Tensors: int(r.GetTensors()),
		Generation: r.GetGeneration(), Started: time.UnixMilli(r.GetStartedUnixMs()), Version: r.GetVersion(),
		State: r.GetState(), ProtocolVersion: r.GetProtocolVersion(), Goroutines: int(r.GetGoroutines()),
		OpenFDs: int(r.GetOpenFds()), PublisherPID: r.GetPublisherPid(), Metadata: r.GetMetadata()}
	if r.GetConfig() != nil {
		s.Config = cacheconfig.FromProto(r.GetConfig())
	}
	for _, l := range r.GetLeases() {
		s.Leases = append(s.Leases, LeaseInfo{ID: l.GetId(), PID: l.GetPid(), UID: l.GetUid(),
			ClientName: l.GetClientName(), Since: time.UnixMilli(l.GetSinceUnixMs())})
	}
	return s, nil
}

// Stop asks the daemon to stop. With force every lease ends at once;
// otherwise the daemon notifies its leases and waits up to timeout (0: its
// default, 30 s) for them; if leases remain it answers FAILED_PRECONDITION
// naming them and keeps serving. ctx must outlast timeout. It returns the
// number of leases when the stop began. The daemon exits shortly after a
// successful Stop; wait for its process to be sure.
func (c *Client) Stop(ctx context.Context, force bool, timeout time.Duration) (int, error) {
	r, err := c.rpc.Stop(ctx, &daemonv1.StopRequest{Force: force, TimeoutMs: uint64(timeout.Milliseconds())})
	if err != nil {
		return 0, fmt.Errorf("stop %s: %w", c.socket, err)
	}
	return int(r.GetLeasesAtStop()), nil
}
