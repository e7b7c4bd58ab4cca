package backendrpc

import (
	"context"
	"github.com/wcache/wcache/sdk"
	"sync"
	"time"

	"github.com/wcache/wcache/internal/fdpass"
	backendv1 "github.com/wcache/wcache/proto/wcache/backend/v1"
)

// Load progress over gRPC is throttled: a message goes out when at least
// progressBytesInterval bytes or progressTimeInterval have passed since the
// previous one. The final message (done = true) is always sent.
const (
	progressBytesInterval = 64 << 20
	progressTimeInterval  = 100 * time.Millisecond
)

// grpcServer serves a sdk.Backend implementation as backendv1.BackendServer.
type grpcServer struct {
	backendv1.UnimplementedBackendServer
	impl sdk.Backend
	// fds carries descriptor handles to and from the host (nil: the host
	// opened no descriptor channel).
	fds *fdpass.Channel
}

// NewServer adapts impl to the generated gRPC server interface. Errors
// from impl travel as gRPC statuses with a backendv1.ErrorDetail so that
// the client adapter can rebuild an error wrapping the same sentinel.
func NewServer(impl sdk.Backend) backendv1.BackendServer {
	return &grpcServer{impl: impl}
}

// NewServerWithFDs is NewServer for a plugin whose host opened a
// descriptor channel (fds, see OpenFDChannel): the File of an exported
// handle goes to the host on it, and the descriptor of an imported handle
// comes from it.
func NewServerWithFDs(impl sdk.Backend, fds *fdpass.Channel) backendv1.BackendServer {
	return &grpcServer{impl: impl, fds: fds}
}

func (s *grpcServer) Info(ctx context.Context, _ *backendv1.InfoRequest) (*backendv1.InfoResponse, error) {
	info, err := s.impl.Info(ctx)
	if err != nil {
		return nil, ToStatus(err)
	}
	if c, ok := s.impl.(sdk.Configurable); ok {
		info.Options = c.Options()
	}
	return infoToProto(info), nil
}

// sdk.Configure resolves the host's values against the backend's schema (none
// when it is not sdk.Configurable) and applies them.
func (s *grpcServer) Configure(ctx context.Context, req *backendv1.ConfigureRequest) (*backendv1.ConfigureResponse, error) {
	if err := sdk.Configure(ctx, s.impl, req.GetValues()); err != nil {
		return nil, ToStatus(err)
	}
	return &backendv1.ConfigureResponse{}, nil
}

func (s *grpcServer) Devices(ctx context.Context, _ *backendv1.DevicesRequest) (*backendv1.DevicesResponse, error) {
	devs, err := s.impl.Devices(ctx)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &backendv1.DevicesResponse{Devices: make([]*backendv1.Device, 0, len(devs))}
	for _, d := range devs {
		pd, err := deviceToProto(d)
		if err != nil {
			return nil, ToStatus(err)
		}
		out.Devices = append(out.Devices, pd)
	}
	return out, nil
}

func (s *grpcServer) GetDeviceUUID(ctx context.Context, req *backendv1.GetDeviceUUIDRequest) (*backendv1.GetDeviceUUIDResponse, error) {
	uuid, err := s.impl.DeviceUUID(ctx, int(req.GetOrdinal()))
	if err != nil {
		return nil, ToStatus(err)
	}
	return &backendv1.GetDeviceUUIDResponse{Uuid: uuid}, nil
}

func (s *grpcServer) Allocate(ctx context.Context, req *backendv1.AllocateRequest) (*backendv1.AllocateResponse, error) {
	id, n, err := s.impl.Allocate(ctx, int(req.GetOrdinal()), req.GetBytes())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &backendv1.AllocateResponse{AllocationId: uint64(id), Bytes: n}, nil
}

func (s *grpcServer) Load(req *backendv1.LoadRequest, stream backendv1.Backend_LoadServer) error {
	extents := extentsFromProto(req.GetExtents())
	var total uint64
	for _, e := range extents {
		total += e.Length
	}
	t := newProgressThrottle(total, time.Now, func(done uint64) error {
		return stream.Send(&backendv1.LoadProgress{BytesDone: done, BytesTotal: total})
	})
	ctx := stream.Context()
	if req.GetNoDigest() {
		ctx = sdk.WithoutDigest(ctx)
	}
	stats, err := sdk.LoadWithStats(ctx, s.impl, sdk.AllocationID(req.GetAllocationId()), extents, t.report)
	if err != nil {
		return ToStatus(err)
	}
	if err := t.sendErr(); err != nil {
		return err
	}
	return stream.Send(&backendv1.LoadProgress{BytesDone: total, BytesTotal: total, Done: true, Stats: loadStatsToProto(stats)})
}

func (s *grpcServer) Export(ctx context.Context, req *backendv1.ExportRequest) (*backendv1.ExportResponse, error) {
	h, err := s.impl.Export(ctx, sdk.AllocationID(req.GetAllocationId()))
	if err != nil {
		return nil, ToStatus(err)
	}
	ph := handleToProto(h)
	if h.File != nil {
		// Sent before the answer, so the descriptor is in the host's socket
		// buffer by the time the host reads the token.
		defer h.File.Close()
		if s.fds == nil {
			return nil, ToStatus(sdk.Errorf(sdk.ErrUnsupported, "export a %s handle: the host opened no descriptor channel (a wcache older than this plugin?)", h.Kind))
		}
		if ph.FdToken, err = s.fds.Send(h.File); err != nil {
			return nil, ToStatus(sdk.Errorf(sdk.ErrUnavailable, "export a %s handle: %v", h.Kind, err))
		}
	}
	return &backendv1.ExportResponse{Handle: ph}, nil
}

func (s *grpcServer) Import(ctx context.Context, req *backendv1.ImportRequest) (*backendv1.ImportResponse, error) {
	if req.GetHandle() == nil {
		return nil, ToStatus(sdk.Errorf(sdk.ErrInvalidArgument, "import without a handle"))
	}
	h := handleFromProto(req.GetHandle())
	if token := req.GetHandle().GetFdToken(); token != 0 {
		if s.fds == nil {
			return nil, ToStatus(sdk.Errorf(sdk.ErrInvalidArgument, "import a %s handle with descriptor %d: no descriptor channel", h.Kind, token))
		}
		tctx, cancel := context.WithTimeout(ctx, fdWait)
		f, err := s.fds.Take(tctx, token)
		cancel()
		if err != nil {
			return nil, ToStatus(sdk.Errorf(sdk.ErrInvalidArgument, "import a %s handle: %v", h.Kind, err))
		}
		defer f.Close()
		h.File = f
	}
	id, err := s.impl.Import(ctx, int(req.GetOrdinal()), h)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &backendv1.ImportResponse{AllocationId: uint64(id)}, nil
}

func (s *grpcServer) Read(ctx context.Context, req *backendv1.ReadRequest) (*backendv1.ReadResponse, error) {
	if req.GetLength() > sdk.MaxReadBytes {
		return nil, ToStatus(sdk.Errorf(sdk.ErrInvalidArgument, "read of %d bytes exceeds the limit of %d", req.GetLength(), sdk.MaxReadBytes))
	}
	data, err := s.impl.Read(ctx, sdk.AllocationID(req.GetAllocationId()), req.GetOffset(), req.GetLength())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &backendv1.ReadResponse{Data: data}, nil
}

func (s *grpcServer) Digest(ctx context.Context, req *backendv1.DigestRequest) (*backendv1.DigestResponse, error) {
	sums, err := s.impl.Digest(ctx, sdk.AllocationID(req.GetAllocationId()), rangesFromProto(req.GetRanges()))
	if err != nil {
		return nil, ToStatus(err)
	}
	return &backendv1.DigestResponse{Sha256: digestsToProto(sums)}, nil
}

func (s *grpcServer) Free(ctx context.Context, req *backendv1.FreeRequest) (*backendv1.FreeResponse, error) {
	if err := s.impl.Free(ctx, sdk.AllocationID(req.GetAllocationId())); err != nil {
		return nil, ToStatus(err)
	}
	return &backendv1.FreeResponse{}, nil
}

// PeerCopy runs the backend's PeerCopy (sdk.ErrUnsupported when it has none)
// and streams its progress, throttled as Load's. The final message names
// the new allocation; when it cannot be sent (the host went away) the
// allocation is freed, so a copy the host never learnt of leaves nothing.
func (s *grpcServer) PeerCopy(req *backendv1.PeerCopyRequest, stream backendv1.Backend_PeerCopyServer) error {
	if req.GetSource() == nil {
		return ToStatus(sdk.Errorf(sdk.ErrInvalidArgument, "peer copy without a source handle"))
	}
	if _, ok := s.impl.(sdk.PeerCopier); !ok {
		return ToStatus(sdk.Errorf(sdk.ErrUnsupported, "peer copy: this backend cannot copy from a peer's memory"))
	}
	ctx := stream.Context()
	src := handleFromProto(req.GetSource())
	if token := req.GetSource().GetFdToken(); token != 0 {
		if s.fds == nil {
			return ToStatus(sdk.Errorf(sdk.ErrInvalidArgument, "peer copy from a %s handle with descriptor %d: no descriptor channel", src.Kind, token))
		}
		tctx, cancel := context.WithTimeout(ctx, fdWait)
		f, err := s.fds.Take(tctx, token)
		cancel()
		if err != nil {
			return ToStatus(sdk.Errorf(sdk.ErrInvalidArgument, "peer copy from a %s handle: %v", src.Kind, err))
		}
		defer f.Close()
		src.File = f
	}
	total := req.GetLength()
	if total == 0 {
		total = src.Size
	}
	t := newProgressThrottle(total, time.Now, func(done uint64) error {
		return stream.Send(&backendv1.PeerCopyProgress{BytesDone: done, BytesTotal: total})
	})
	res, err := sdk.PeerCopy(ctx, s.impl, sdk.PeerCopyRequest{Ordinal: int(req.GetOrdinal()), Source: src, Length: req.GetLength()}, t.report)
	if err != nil {
		return ToStatus(err)
	}
	err = t.sendErr()
	if err == nil {
		err = stream.Send(&backendv1.PeerCopyProgress{BytesDone: total, BytesTotal: total, Done: true,
			AllocationId: uint64(res.ID), Bytes: res.Bytes, Stats: peerCopyStatsToProto(res.Stats)})
	}
	if err != nil {
		_ = s.impl.Free(context.WithoutCancel(ctx), res.ID)
		return err
	}
	return nil
}

// progressThrottle forwards Load progress at most every
// progressBytesInterval bytes or progressTimeInterval. It is safe for
// concurrent use, so a backend that reports from several goroutines cannot
// interleave stream.Send calls. After a send fails it stops sending and
// remembers the error; the stream's context is then cancelled too, which
// stops the Load.
type progressThrottle struct {
	total uint64
	now   func() time.Time
	send  func(done uint64) error

	mu       sync.Mutex
	lastDone uint64
	lastTime time.Time
	sent     bool
	err      error
}

func newProgressThrottle(total uint64, now func() time.Time, send func(uint64) error) *progressThrottle {
	return &progressThrottle{total: total, now: now, send: send}
}

// report is the sdk.ProgressFunc handed to the backend. The total argument is
// ignored: the adapter knows the total from the request.
func (p *progressThrottle) report(done, _ uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil || done >= p.total || (p.sent && done <= p.lastDone) {
		// The final count goes out with the done message.
		return
	}
	now := p.now()
	if p.sent && done-p.lastDone < progressBytesInterval && now.Sub(p.lastTime) < progressTimeInterval {
		return
	}
	if err := p.send(done); err != nil {
		p.err = err
		return
	}
	p.sent, p.lastDone, p.lastTime = true, done, now
}

func (p *progressThrottle) sendErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
