package backendrpc

import (
	"context"
	"errors"
	"fmt"
	"github.com/wcache/wcache/sdk"
	"io"
	"time"

	"google.golang.org/grpc"

	"github.com/wcache/wcache/internal/fdpass"

	backendv1 "github.com/wcache/wcache/proto/wcache/backend/v1"
	"github.com/wcache/wcache/sdk/names"
)

// grpcClient is the host-side sdk.Backend that talks to a plugin over gRPC.
type grpcClient struct {
	rpc backendv1.BackendClient
	fds *fdpass.Channel // nil: the plugin has no descriptor channel
}

// fdWait bounds how long one side of the plugin descriptor channel waits
// for a descriptor whose token it was told (it was sent before the token,
// so it is normally there already).
const fdWait = 10 * time.Second

// NewClient returns a sdk.Backend that forwards every call over conn to a
// plugin served by sdk/plugin.Serve. Errors come back as *sdk.RemoteError wrapping the
// plugin's sentinel (errors.Is works), or as *sdk.TransportError wrapping
// sdk.ErrUnavailable when the plugin could not be reached (it died, or closed
// the connection).
func NewClient(conn grpc.ClientConnInterface) sdk.Backend {
	return &grpcClient{rpc: backendv1.NewBackendClient(conn)}
}

// NewClientWithFDs is NewClient for a plugin started with a
// descriptor channel (fds): Export returns descriptor handles with their
// File, and Import sends the File of one.
func NewClientWithFDs(conn grpc.ClientConnInterface, fds *fdpass.Channel) sdk.Backend {
	return &grpcClient{rpc: backendv1.NewBackendClient(conn), fds: fds}
}

func (c *grpcClient) Info(ctx context.Context) (sdk.Info, error) {
	resp, err := c.rpc.Info(ctx, &backendv1.InfoRequest{})
	if err != nil {
		return sdk.Info{}, fromStatus(ctx, "Info", err)
	}
	info := infoFromProto(resp)
	for _, k := range info.HandleKinds {
		if err := names.ValidateHandleKind(k); err != nil {
			return sdk.Info{}, fmt.Errorf("backend announced a handle kind the core cannot name: %w: protocol violation", err)
		}
	}
	return info, nil
}

// ConfigureValues sends the host's values; the plugin resolves them. A
// plugin that predates sdk.Configure answers sdk.ErrUnsupported.
func (c *grpcClient) ConfigureValues(ctx context.Context, values map[string]string) error {
	if _, err := c.rpc.Configure(ctx, &backendv1.ConfigureRequest{Values: values}); err != nil {
		return fromStatus(ctx, "Configure", err)
	}
	return nil
}

func (c *grpcClient) Devices(ctx context.Context) ([]sdk.Device, error) {
	resp, err := c.rpc.Devices(ctx, &backendv1.DevicesRequest{})
	if err != nil {
		return nil, fromStatus(ctx, "Devices", err)
	}
	out := make([]sdk.Device, len(resp.GetDevices()))
	for i, d := range resp.GetDevices() {
		out[i] = deviceFromProto(d)
	}
	return out, nil
}

func (c *grpcClient) DeviceUUID(ctx context.Context, ordinal int) (string, error) {
	ord, err := ordinalToProto(ordinal)
	if err != nil {
		return "", err
	}
	resp, err := c.rpc.GetDeviceUUID(ctx, &backendv1.GetDeviceUUIDRequest{Ordinal: ord})
	if err != nil {
		return "", fromStatus(ctx, "DeviceUUID", err)
	}
	return resp.GetUuid(), nil
}

func (c *grpcClient) Allocate(ctx context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
	ord, err := ordinalToProto(ordinal)
	if err != nil {
		return 0, 0, err
	}
	resp, err := c.rpc.Allocate(ctx, &backendv1.AllocateRequest{Ordinal: ord, Bytes: bytes})
	if err != nil {
		return 0, 0, fromStatus(ctx, "Allocate", err)
	}
	if resp.GetBytes() < bytes {
		return 0, 0, fmt.Errorf("backend reserved %d bytes for a request of %d: protocol violation", resp.GetBytes(), bytes)
	}
	return sdk.AllocationID(resp.GetAllocationId()), resp.GetBytes(), nil
}

// Load streams progress from the plugin: progress (when not nil) is called
// for every message, from the calling goroutine, ending with done == total.
// A stream that ends without the final message is a *sdk.TransportError.
func (c *grpcClient) Load(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
	_, err := c.LoadWithStats(ctx, id, extents, progress)
	return err
}

// LoadWithStats is Load returning the counters the plugin sent with its
// final message (zero when it sent none: an older plugin, or one that does
// not measure them).
func (c *grpcClient) LoadWithStats(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) (sdk.LoadStats, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Load(ctx, &backendv1.LoadRequest{AllocationId: uint64(id), Extents: extentsToProto(extents), NoDigest: !sdk.DigestWanted(ctx)})
	if err != nil {
		return sdk.LoadStats{}, fromStatus(ctx, "Load", err)
	}
	msg, err := recvFinal(ctx, "Load", "load", stream.Recv, progress)
	if err != nil {
		return sdk.LoadStats{}, err
	}
	if progress != nil {
		progress(msg.GetBytesDone(), msg.GetBytesTotal())
	}
	return loadStatsFromProto(msg.GetStats()), nil
}

// progressMessage is a message of a progress stream (Load, PeerCopy): the
// bytes done of the total, and done on the final message.
type progressMessage interface {
	GetBytesDone() uint64
	GetBytesTotal() uint64
	GetDone() bool
}

// recvFinal receives op's progress stream through recv until its final
// message, which it returns, calling progress (when not nil) for every
// message before it. A stream that ends without the final message is a
// *sdk.TransportError saying the what did not complete; a failed Recv is the
// error fromStatus makes of it.
func recvFinal[M progressMessage](ctx context.Context, op, what string, recv func() (M, error), progress sdk.ProgressFunc) (M, error) {
	for {
		msg, err := recv()
		if errors.Is(err, io.EOF) {
			return msg, &sdk.TransportError{Op: op, Err: fmt.Errorf("progress stream ended before the %s completed", what)}
		}
		if err != nil {
			return msg, fromStatus(ctx, op, err)
		}
		if msg.GetDone() {
			return msg, nil
		}
		if progress != nil {
			progress(msg.GetBytesDone(), msg.GetBytesTotal())
		}
	}
}

func (c *grpcClient) Export(ctx context.Context, id sdk.AllocationID) (sdk.Handle, error) {
	resp, err := c.rpc.Export(ctx, &backendv1.ExportRequest{AllocationId: uint64(id)})
	if err != nil {
		return sdk.Handle{}, fromStatus(ctx, "Export", err)
	}
	if resp.GetHandle() == nil {
		return sdk.Handle{}, errors.New("backend exported no handle: protocol violation")
	}
	h := handleFromProto(resp.GetHandle())
	if token := resp.GetHandle().GetFdToken(); token != 0 {
		if c.fds == nil {
			return sdk.Handle{}, fmt.Errorf("backend exported a %s handle with descriptor %d, but this host has no descriptor channel: protocol violation", h.Kind, token)
		}
		tctx, cancel := context.WithTimeout(ctx, fdWait)
		defer cancel()
		f, err := c.fds.Take(tctx, token)
		if err != nil {
			return sdk.Handle{}, &sdk.TransportError{Op: "Export", Err: err}
		}
		h.File = f
	} else if sdk.IsDescriptorKind(h.Kind) {
		return sdk.Handle{}, fmt.Errorf("backend exported a %s handle without its descriptor: protocol violation", h.Kind)
	}
	if err := names.ValidateHandleKind(h.Kind); err != nil {
		if h.File != nil {
			h.File.Close()
		}
		return sdk.Handle{}, fmt.Errorf("backend exported a handle the core cannot name: %w: protocol violation", err)
	}
	return h, nil
}

func (c *grpcClient) Import(ctx context.Context, ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	ord, err := ordinalToProto(ordinal)
	if err != nil {
		return 0, err
	}
	ph := handleToProto(h)
	if h.File != nil {
		if c.fds == nil {
			return 0, sdk.Errorf(sdk.ErrUnsupported, "import a %s handle: the plugin has no descriptor channel", h.Kind)
		}
		if ph.FdToken, err = c.fds.Send(h.File); err != nil {
			return 0, &sdk.TransportError{Op: "Import", Err: err}
		}
	}
	resp, err := c.rpc.Import(ctx, &backendv1.ImportRequest{Ordinal: ord, Handle: ph})
	if err != nil {
		return 0, fromStatus(ctx, "Import", err)
	}
	return sdk.AllocationID(resp.GetAllocationId()), nil
}

func (c *grpcClient) Read(ctx context.Context, id sdk.AllocationID, offset, length uint64) ([]byte, error) {
	if length > sdk.MaxReadBytes {
		return nil, sdk.Errorf(sdk.ErrInvalidArgument, "read of %d bytes exceeds the limit of %d", length, sdk.MaxReadBytes)
	}
	resp, err := c.rpc.Read(ctx, &backendv1.ReadRequest{AllocationId: uint64(id), Offset: offset, Length: length})
	if err != nil {
		return nil, fromStatus(ctx, "Read", err)
	}
	if uint64(len(resp.GetData())) != length {
		return nil, fmt.Errorf("backend returned %d bytes for a read of %d: protocol violation", len(resp.GetData()), length)
	}
	return resp.GetData(), nil
}

func (c *grpcClient) Digest(ctx context.Context, id sdk.AllocationID, ranges []sdk.Range) ([][32]byte, error) {
	resp, err := c.rpc.Digest(ctx, &backendv1.DigestRequest{AllocationId: uint64(id), Ranges: rangesToProto(ranges)})
	if err != nil {
		return nil, fromStatus(ctx, "Digest", err)
	}
	return digestsFromProto(resp.GetSha256(), len(ranges))
}

func (c *grpcClient) Free(ctx context.Context, id sdk.AllocationID) error {
	if _, err := c.rpc.Free(ctx, &backendv1.FreeRequest{AllocationId: uint64(id)}); err != nil {
		return fromStatus(ctx, "Free", err)
	}
	return nil
}

// PeerCopy sends the source handle (its descriptor on the plugin
// descriptor channel) and streams progress; the final message names the
// new allocation. A plugin without PeerCopy answers sdk.ErrUnsupported. A
// stream that ends without the final message is a *sdk.TransportError (the
// plugin frees what it allocated when it cannot deliver the result).
func (c *grpcClient) PeerCopy(ctx context.Context, req sdk.PeerCopyRequest, progress sdk.ProgressFunc) (sdk.PeerCopyResult, error) {
	ord, err := ordinalToProto(req.Ordinal)
	if err != nil {
		return sdk.PeerCopyResult{}, err
	}
	ph := handleToProto(req.Source)
	if req.Source.File != nil {
		if c.fds == nil {
			return sdk.PeerCopyResult{}, sdk.Errorf(sdk.ErrUnsupported, "peer copy from a %s handle: the plugin has no descriptor channel", req.Source.Kind)
		}
		if ph.FdToken, err = c.fds.Send(req.Source.File); err != nil {
			return sdk.PeerCopyResult{}, &sdk.TransportError{Op: "PeerCopy", Err: err}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.PeerCopy(ctx, &backendv1.PeerCopyRequest{Ordinal: ord, Source: ph, Length: req.Length})
	if err != nil {
		return sdk.PeerCopyResult{}, fromStatus(ctx, "PeerCopy", err)
	}
	msg, err := recvFinal(ctx, "PeerCopy", "copy", stream.Recv, progress)
	if err != nil {
		return sdk.PeerCopyResult{}, err
	}
	res := sdk.PeerCopyResult{ID: sdk.AllocationID(msg.GetAllocationId()), Bytes: msg.GetBytes(), Stats: peerCopyStatsFromProto(msg.GetStats())}
	want := req.Length
	if want == 0 {
		want = req.Source.Size
	}
	if res.Bytes < want {
		_ = c.Free(context.WithoutCancel(ctx), res.ID)
		return sdk.PeerCopyResult{}, fmt.Errorf("backend reserved %d bytes for a peer copy of %d: protocol violation", res.Bytes, want)
	}
	if progress != nil {
		progress(msg.GetBytesDone(), msg.GetBytesTotal())
	}
	return res, nil
}
