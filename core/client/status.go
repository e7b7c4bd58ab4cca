package client

import (
	"context"
	"fmt"
	"time"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
)

// LeaseInfo is one attached client as the daemon reports it (and as
// core/daemon lists its own leases: daemon.LeaseInfo is this type).
type LeaseInfo struct {
	ID         uint64
	PID        int32
	UID        uint32
	ClientName string
	Since      time.Time
	// Generation is the generation the lease holds (0 from a daemon older
	// than several generations).
	Generation uint64
}

// String names the lease, its peer and its client ("unnamed" when the
// client gave no name).
func (l LeaseInfo) String() string {
	name := l.ClientName
	if name == "" {
		name = "unnamed"
	}
	return fmt.Sprintf("lease %d (pid %d, uid %d, %s)", l.ID, l.PID, l.UID, name)
}

// GenerationStatus is one generation a daemon holds (a daemon holds
// several: a target and a draft model, co-located models).
type GenerationStatus struct {
	Generation   uint64
	State        string // "publishing", "serving" or "draining"
	Model        string
	Config       cacheconfig.Config
	ConfigDigest string
	// Bytes are the tensor bytes; DeviceBytes the arenas' sizes as the
	// backend reported them: the device memory it holds.
	Bytes, DeviceBytes uint64
	Tensors            int
	Leases             []LeaseInfo
	PublisherPID       int32
	Metadata           map[string]string
	Source             string
	Started            time.Time
	Files              []cacheconfig.FileContent
	// FilledFrom says where a loaded generation's bytes came from: "files",
	// "peer GPU-<uuid>" (a sibling daemon on the node), "peer HOST:PORT"
	// (another node's daemon); "" for published weights and from a daemon
	// older than peer fill. FillFallback is why a peer fill was tried and
	// not used ("" when none was tried or it worked).
	FilledFrom, FillFallback string
}

// Status describes a daemon. The single-generation fields (Model, Config,
// ConfigDigest, Bytes, Tensors, Generation, Metadata, Files, DeviceBytes)
// describe its oldest serving generation; Generations lists every one.
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
	// StartPhases are the daemon's own timings of its start-up.
	StartPhases StartPhases
	// PublisherPID is the publishing client while State is "publishing".
	PublisherPID int32
	// Metadata is the metadata map of published weights.
	Metadata map[string]string
	// Files and ContentPolicies are as in Manifest.
	Files           []cacheconfig.FileContent
	ContentPolicies []cacheconfig.Policy
	// DeviceBytes is the device memory the served generation holds: its
	// arenas' sizes as the backend allocated them (0 while empty or
	// publishing). DeviceBytesTotal is all the daemon holds, a publish in
	// progress included: the figure to hand to an engine's KV-cache sizing
	// (SGLang preloaded_weights_bytes). Both 0 from a daemon older than
	// these fields.
	DeviceBytes, DeviceBytesTotal uint64
	// MaxBytes and ReserveBytes are the daemon's memory cap and reserve
	// (serve --max-bytes, --reserve-bytes; 0: none).
	MaxBytes, ReserveBytes uint64
	// Generations are every generation the daemon holds, oldest first
	// (nil from a daemon older than several generations).
	Generations []GenerationStatus
	// FilledFrom and FillFallback are the oldest generation's
	// (GenerationStatus.FilledFrom, FillFallback).
	FilledFrom, FillFallback string
}

// ResidentBytes is the device memory the daemon holds, in total and per
// generation id: what an engine hands to its KV-cache sizing (SGLang
// preloaded_weights_bytes, vLLM ExternalWeightCharges). A daemon older
// than several generations reports its total only (byGeneration nil).
func (s *Status) ResidentBytes() (total uint64, byGeneration map[uint64]uint64) {
	if len(s.Generations) == 0 {
		return s.DeviceBytesTotal, nil
	}
	byGeneration = make(map[uint64]uint64, len(s.Generations))
	for _, g := range s.Generations {
		byGeneration[g.Generation] = g.DeviceBytes
	}
	return s.DeviceBytesTotal, byGeneration
}

// StartPhases are the durations of a daemon's start-up as the daemon
// measured them (daemon.v1 StartPhases; 0 where it reported none): open and
// plan the checkpoint, take the identity lock, Allocate, Load (the fill) and
// Export every arena, and Total from the start of its start-up until its
// socket listened. BytesLoaded / Load is the fill rate.
type StartPhases struct {
	Plan, Lock, Allocate, Load, Export, Total time.Duration
	BytesLoaded, BytesAllocated               uint64
	// BytesAdopted were taken over as descriptors (serve --takeover)
	// instead of read; Source is "files", "takeover" or "" (empty or
	// published).
	BytesAdopted uint64
	Source       string
	// BytesFromPeer were copied from a peer instead of read (peer fill;
	// Load is then the copy), PeerVerify the check of the copy.
	BytesFromPeer uint64
	PeerVerify    time.Duration
	// PluginRestarts counts the backend plugins the daemon replaced with
	// descriptor handles (no reload); LastRestart is the last one's time.
	PluginRestarts int
	LastRestart    time.Duration
}

// Status asks the daemon to describe itself.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	r, err := c.rpc.Status(ctx, &daemonv1.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", c.socket, err)
	}
	return statusFromProto(r), nil
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
