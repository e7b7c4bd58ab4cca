package pluginhost

import (
	"context"

	"github.com/wcache/wcache/sdk"
)

// backend forwards to the gRPC client and, when a call fails because the
// plugin died, answers with the plugin's *ExitError (its exit status and
// last log lines) instead of a bare transport error.
type backend struct {
	inner sdk.Backend
	p     *Plugin
}

var (
	_ sdk.Backend         = (*backend)(nil)
	_ sdk.StatsLoader     = (*backend)(nil)
	_ sdk.PeerCopier      = (*backend)(nil)
	_ sdk.ValueConfigurer = (*backend)(nil)
)

func (b *backend) ConfigureValues(ctx context.Context, values map[string]string) error {
	return b.p.diedDuring("Configure", sdk.Configure(ctx, b.inner, values))
}

func (b *backend) Info(ctx context.Context) (sdk.Info, error) {
	v, err := b.inner.Info(ctx)
	return v, b.p.diedDuring("Info", err)
}

func (b *backend) Devices(ctx context.Context) ([]sdk.Device, error) {
	v, err := b.inner.Devices(ctx)
	return v, b.p.diedDuring("Devices", err)
}

func (b *backend) DeviceUUID(ctx context.Context, ordinal int) (string, error) {
	v, err := b.inner.DeviceUUID(ctx, ordinal)
	return v, b.p.diedDuring("DeviceUUID", err)
}

func (b *backend) Allocate(ctx context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
	id, n, err := b.inner.Allocate(ctx, ordinal, bytes)
	return id, n, b.p.diedDuring("Allocate", err)
}

func (b *backend) Load(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
	_, err := b.LoadWithStats(ctx, id, extents, progress)
	return err
}

func (b *backend) LoadWithStats(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) (sdk.LoadStats, error) {
	st, err := sdk.LoadWithStats(ctx, b.inner, id, extents, progress)
	return st, b.p.diedDuring("Load", err)
}

func (b *backend) PeerCopy(ctx context.Context, req sdk.PeerCopyRequest, progress sdk.ProgressFunc) (sdk.PeerCopyResult, error) {
	res, err := sdk.PeerCopy(ctx, b.inner, req, progress)
	return res, b.p.diedDuring("PeerCopy", err)
}

func (b *backend) Export(ctx context.Context, id sdk.AllocationID) (sdk.Handle, error) {
	h, err := b.inner.Export(ctx, id)
	return h, b.p.diedDuring("Export", err)
}

func (b *backend) Import(ctx context.Context, ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	id, err := b.inner.Import(ctx, ordinal, h)
	return id, b.p.diedDuring("Import", err)
}

func (b *backend) Read(ctx context.Context, id sdk.AllocationID, offset, length uint64) ([]byte, error) {
	v, err := b.inner.Read(ctx, id, offset, length)
	return v, b.p.diedDuring("Read", err)
}

func (b *backend) Digest(ctx context.Context, id sdk.AllocationID, ranges []sdk.Range) ([][32]byte, error) {
	v, err := b.inner.Digest(ctx, id, ranges)
	return v, b.p.diedDuring("Digest", err)
}

func (b *backend) Free(ctx context.Context, id sdk.AllocationID) error {
	return b.p.diedDuring("Free", b.inner.Free(ctx, id))
}
