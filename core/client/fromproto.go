package client

import (
	"errors"
	"fmt"
	"time"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/tensorview"
)

// This file holds every daemon.v1 → domain conversion of the client; the
// daemon's domain → daemon.v1 conversions are in core/daemon/toproto.go.

// manifestFromProto converts and checks a wire manifest: every tensor must
// name an existing handle and lie inside it.
func manifestFromProto(pm *daemonv1.Manifest) (*Manifest, error) {
	m := &Manifest{
		DeviceUUID: pm.GetDeviceUuid(), Backend: pm.GetBackend(), ConfigDigest: pm.GetConfigDigest(),
		Generation: pm.GetGeneration(), LeaseID: pm.GetLeaseId(), ProtocolVersion: pm.GetProtocolVersion(),
		Metadata: pm.GetMetadata(), FDToken: pm.GetFdToken(),
		Files:           cacheconfig.FilesWithSHA256(pm.GetFiles(), pm.GetFileSha256()),
		ContentPolicies: cacheconfig.PoliciesFromStrings(pm.GetContentPolicies()),
	}
	if pm.GetConfig() != nil {
		m.Config = cacheconfig.FromProto(pm.GetConfig())
	}
	var err error
	if table := pm.GetTensorTable(); table != nil {
		if len(pm.GetTensors()) > 0 {
			return nil, fmt.Errorf("manifest carries both tensors and a tensor table: %w", ErrBadManifest)
		}
		m.Handles, m.Tensors, err = placesFromTable(pm.GetHandles(), table)
	} else {
		m.Handles, m.Tensors, err = placesFromProto(pm.GetHandles(), pm.GetTensors())
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// placesFromTable converts a manifest's tensor table (AttachRequest's
// tensor_table) and checks it as placesFromProto does.
func placesFromTable(ph []*daemonv1.Handle, table *daemonv1.TensorTable) ([]Handle, []Tensor, error) {
	handles := handlesFromProto(ph)
	// Filled in place and checked through a pointer: a Tensor is 88 bytes,
	// and copying each of 100,000 twice (into checkPlace, then by append)
	// would be a measurable share of a large attach.
	tensors := make([]Tensor, len(table.GetNameShared()))
	i := 0
	err := table.Each(func(e daemonv1.TableEntry) error {
		t := &tensors[i]
		*t = Tensor{Name: e.Name, DType: e.Dtype, Shape: e.Shape, Handle: int(e.HandleIndex), Offset: e.Offset, Length: e.Length}
		i++
		return checkPlace(handles, t)
	})
	if errors.Is(err, daemonv1.ErrBadTensorTable) {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadManifest, err)
	}
	if err != nil {
		return nil, nil, err
	}
	return handles, tensors, nil
}

func handlesFromProto(ph []*daemonv1.Handle) []Handle {
	hs := make([]Handle, len(ph))
	for i, h := range ph {
		hs[i] = Handle{Kind: h.GetKind(), Data: h.GetData(), Size: h.GetSize()}
	}
	return hs
}

// checkPlace fails with ErrBadManifest unless t names an existing handle,
// lies inside it, and — for a dtype of the vocabulary (tensorview) — its
// view (shape, and a published layout's strides and storage offset) stays
// inside its Length bytes. A dtype outside the vocabulary is left as
// bytes: nothing views it.
func checkPlace(handles []Handle, t *Tensor) error {
	if t.Handle >= len(handles) {
		return fmt.Errorf("tensor %q names handle %d of %d: %w", t.Name, t.Handle, len(handles), ErrBadManifest)
	}
	size := handles[t.Handle].Size
	if t.Offset > size || t.Length > size-t.Offset {
		return fmt.Errorf("tensor %q [%d, +%d) lies outside handle %d of %d bytes: %w",
			t.Name, t.Offset, t.Length, t.Handle, size, ErrBadManifest)
	}
	if _, known := tensorview.ElementBits(t.DType); !known {
		return nil
	}
	v := tensorview.View{DType: t.DType, Shape: t.Shape}
	if t.Layout != nil {
		v.StorageOffset = t.Layout.StorageOffset
		if len(t.Layout.Strides) > 0 {
			v.Strides = t.Layout.Strides
		}
	}
	if err := v.Check(t.Length); err != nil {
		return fmt.Errorf("tensor %q: %w: %w", t.Name, err, ErrBadManifest)
	}
	return nil
}

// placesFromProto converts and checks handles and tensor places (of a
// manifest or a publish plan): every tensor must name an existing handle
// and lie inside it.
func placesFromProto(ph []*daemonv1.Handle, pt []*daemonv1.Tensor) ([]Handle, []Tensor, error) {
	handles := handlesFromProto(ph)
	tensors := make([]Tensor, len(pt))
	for i, t := range pt {
		tensors[i] = Tensor{Name: t.GetName(), DType: t.GetDtype(), Shape: t.GetShape(), Handle: int(t.GetHandleIndex()),
			Offset: t.GetOffset(), Length: t.GetLength(), Layout: layoutFromProto(t.GetLayout())}
		if err := checkPlace(handles, &tensors[i]); err != nil {
			return nil, nil, err
		}
	}
	return handles, tensors, nil
}

// layoutFromProto converts a wire layout (nil stays nil).
func layoutFromProto(l *daemonv1.TensorLayout) *Layout {
	if l == nil {
		return nil
	}
	return &Layout{Storage: l.GetStorage(), Strides: l.GetStrides(), StorageOffset: l.GetStorageOffset()}
}

// statusFromProto converts a Status answer.
func statusFromProto(r *daemonv1.StatusResponse) *Status {
	s := &Status{PID: int(r.GetPid()), DeviceUUID: r.GetDeviceUuid(), Backend: r.GetBackend(), Model: r.GetModel(),
		ConfigDigest: r.GetConfigDigest(), Bytes: r.GetBytes(), Tensors: int(r.GetTensors()),
		Generation: r.GetGeneration(), Started: time.UnixMilli(r.GetStartedUnixMs()), Version: r.GetVersion(),
		State: r.GetState(), ProtocolVersion: r.GetProtocolVersion(), Goroutines: int(r.GetGoroutines()),
		OpenFDs: int(r.GetOpenFds()), PublisherPID: r.GetPublisherPid(), Metadata: r.GetMetadata(),
		Files: cacheconfig.FilesWithSHA256(r.GetFiles(), r.GetFileSha256()), ContentPolicies: cacheconfig.PoliciesFromStrings(r.GetContentPolicies()),
		DeviceBytes: r.GetDeviceBytes(), DeviceBytesTotal: r.GetDeviceBytesTotal(),
		MaxBytes: r.GetMaxBytes(), ReserveBytes: r.GetReserveBytes(),
		FilledFrom: r.GetFilledFrom(), FillFallback: r.GetFillFallback()}
	if r.GetConfig() != nil {
		s.Config = cacheconfig.FromProto(r.GetConfig())
	}
	if p := r.GetStartPhases(); p != nil {
		s.StartPhases = StartPhases{Plan: time.Duration(p.GetPlanNs()), Lock: time.Duration(p.GetLockNs()),
			Allocate: time.Duration(p.GetAllocateNs()), Load: time.Duration(p.GetLoadNs()),
			Export: time.Duration(p.GetExportNs()), Total: time.Duration(p.GetTotalNs()),
			BytesLoaded: p.GetBytesLoaded(), BytesAllocated: p.GetBytesAllocated(),
			BytesAdopted: p.GetBytesAdopted(), Source: p.GetSource(), PluginRestarts: int(p.GetPluginRestarts()),
			LastRestart: time.Duration(p.GetLastRestartNs()), BytesFromPeer: p.GetBytesFromPeer(),
			PeerVerify: time.Duration(p.GetPeerVerifyNs())}
	}
	for _, l := range r.GetLeases() {
		s.Leases = append(s.Leases, leaseFromProto(l))
	}
	for _, g := range r.GetGenerations() {
		gs := GenerationStatus{Generation: g.GetGeneration(), State: stateName(g.GetState()), Model: g.GetModel(),
			ConfigDigest: g.GetConfigDigest(), Bytes: g.GetBytes(), Tensors: int(g.GetTensors()),
			DeviceBytes: g.GetDeviceBytes(), PublisherPID: g.GetPublisherPid(), Metadata: g.GetMetadata(),
			Source: g.GetSource(), Started: time.UnixMilli(g.GetStartedUnixMs()), Files: cacheconfig.FilesWithSHA256(g.GetFiles(), g.GetFileSha256()),
			FilledFrom: g.GetFilledFrom(), FillFallback: g.GetFillFallback()}
		if g.GetConfig() != nil {
			gs.Config = cacheconfig.FromProto(g.GetConfig())
		}
		for _, l := range g.GetLeases() {
			gs.Leases = append(gs.Leases, leaseFromProto(l))
		}
		s.Generations = append(s.Generations, gs)
	}
	return s
}

// leaseFromProto converts one lease of a Status.
func leaseFromProto(l *daemonv1.Lease) LeaseInfo {
	return LeaseInfo{ID: l.GetId(), PID: l.GetPid(), UID: l.GetUid(), ClientName: l.GetClientName(),
		Since: time.UnixMilli(l.GetSinceUnixMs()), Generation: l.GetGeneration()}
}

// stateName is a DaemonState as Status.State spells it ("serving", …).
func stateName(s daemonv1.DaemonState) string {
	switch s {
	case daemonv1.DaemonState_DAEMON_STATE_EMPTY:
		return "empty"
	case daemonv1.DaemonState_DAEMON_STATE_PUBLISHING:
		return "publishing"
	case daemonv1.DaemonState_DAEMON_STATE_SERVING:
		return "serving"
	case daemonv1.DaemonState_DAEMON_STATE_DRAINING:
		return "draining"
	case daemonv1.DaemonState_DAEMON_STATE_STOPPING:
		return "stopping"
	}
	return ""
}

// mismatchFromProto converts the ConfigMismatch detail of a refused attach.
func mismatchFromProto(cm *daemonv1.ConfigMismatch) *cacheconfig.MismatchError {
	me := &cacheconfig.MismatchError{Omitted: int(cm.GetOmitted()), Generation: cm.GetGeneration(),
		ConfigDigest: cm.GetConfigDigest(), Generations: int(cm.GetGenerations())}
	for _, fd := range cm.GetDiffs() {
		me.Diffs = append(me.Diffs, cacheconfig.FieldDiff{Field: fd.GetField(), Daemon: fd.GetDaemonValue(), Client: fd.GetClientValue(),
			DaemonAbsent: fd.GetDaemonAbsent(), ClientAbsent: fd.GetClientAbsent(), Truncated: fd.GetTruncated()})
	}
	return me
}

// noticeFromProto converts a lease notice.
func noticeFromProto(n *daemonv1.Notice) Notice {
	notice := Notice{Kind: NoticeKind(n.GetKind()), Message: n.GetMessage()}
	if ms := n.GetDeadlineUnixMs(); ms != 0 {
		notice.Deadline = time.UnixMilli(ms)
	}
	return notice
}

// planFromProto converts and checks a publish plan.
func planFromProto(pp *daemonv1.PublishPlan) (*PublishPlan, error) {
	plan := &PublishPlan{DeviceUUID: pp.GetDeviceUuid(), Generation: pp.GetGeneration()}
	var err error
	if plan.Handles, plan.Tensors, err = placesFromProto(pp.GetHandles(), pp.GetTensors()); err != nil {
		return nil, err
	}
	return plan, nil
}

// doneFromProto converts the daemon's confirmation of a publish.
func doneFromProto(d *daemonv1.PublishDone) *PublishResult {
	return &PublishResult{Generation: d.GetGeneration(), ConfigDigest: d.GetConfigDigest(),
		Bytes: d.GetBytes(), Tensors: int(d.GetTensors()), Verified: d.GetVerified()}
}

// emptyFromProto converts the NoWeights detail of the daemon at socket.
func emptyFromProto(socket string, nw *daemonv1.NoWeights) *EmptyError {
	return &EmptyError{Socket: socket, PublisherPID: nw.GetPublisherPid(),
		Publishing: nw.GetState() == daemonv1.DaemonState_DAEMON_STATE_PUBLISHING}
}

// conflictFromProto converts the PublishConflict detail of the daemon at
// socket, whose status message was message.
func conflictFromProto(socket string, pc *daemonv1.PublishConflict, message string) *PublishConflictError {
	return &PublishConflictError{Socket: socket, Reason: pc.GetReason(), State: pc.GetState(),
		PublisherPID: pc.GetPublisherPid(), ConfigDigest: pc.GetConfigDigest(), Message: message}
}
