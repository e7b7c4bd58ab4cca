// Package mock provides sdk.Backends for tests of code that uses a backend
// (the daemon, the client, the CLI, a host):
//
//   - Backend, closure-style: set only the XxxFunc fields a test needs;
//     every method whose func is nil returns an error wrapping
//     sdk.ErrUnsupported, so a test notices an unexpected call.
//   - Memory, a working backend whose allocations are files in a folder
//     (loaded, read, digested, exported and imported for real); it passes
//     the conformance suite, in process and as a plugin.
//   - Wrap, a Backend calling a working one, to inject one failure.
//
// None is a model of a real device; the mock plugin (plugins/mock) is the
// shipped emulator with fault knobs.
package mock

import (
	"context"

	"github.com/wcache/wcache/sdk"
)

// Backend implements sdk.Backend by calling its fields. It is safe for
// concurrent use when the funcs are.
type Backend struct {
	InfoFunc       func(ctx context.Context) (sdk.Info, error)
	DevicesFunc    func(ctx context.Context) ([]sdk.Device, error)
	DeviceUUIDFunc func(ctx context.Context, ordinal int) (string, error)
	AllocateFunc   func(ctx context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error)
	LoadFunc       func(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error
	// LoadStatsFunc, when set, serves Load and LoadWithStats in place of
	// LoadFunc.
	LoadStatsFunc func(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) (sdk.LoadStats, error)
	ExportFunc    func(ctx context.Context, id sdk.AllocationID) (sdk.Handle, error)
	ImportFunc    func(ctx context.Context, ordinal int, h sdk.Handle) (sdk.AllocationID, error)
	ReadFunc      func(ctx context.Context, id sdk.AllocationID, offset, length uint64) ([]byte, error)
	DigestFunc    func(ctx context.Context, id sdk.AllocationID, ranges []sdk.Range) ([][32]byte, error)
	FreeFunc      func(ctx context.Context, id sdk.AllocationID) error
	// PeerCopyFunc serves PeerCopy (sdk.PeerCopier); nil: ErrUnsupported,
	// as a backend without peer copies answers.
	PeerCopyFunc func(ctx context.Context, req sdk.PeerCopyRequest, progress sdk.ProgressFunc) (sdk.PeerCopyResult, error)
	// OptionsFunc is the schema (sdk.Configurable); nil: no options.
	OptionsFunc func() []sdk.Option
	// ConfigureFunc receives the resolved configuration; nil: accepted.
	// Unknown keys and malformed values never reach it (the sdk refuses
	// them against OptionsFunc's schema).
	ConfigureFunc func(ctx context.Context, cfg sdk.Config) error
}

var (
	_ sdk.Backend      = (*Backend)(nil)
	_ sdk.StatsLoader  = (*Backend)(nil)
	_ sdk.Configurable = (*Backend)(nil)
	_ sdk.PeerCopier   = (*Backend)(nil)
)

// PeerCopy calls PeerCopyFunc.
func (b *Backend) PeerCopy(ctx context.Context, req sdk.PeerCopyRequest, progress sdk.ProgressFunc) (sdk.PeerCopyResult, error) {
	if b.PeerCopyFunc == nil {
		return sdk.PeerCopyResult{}, notSet("PeerCopy")
	}
	return b.PeerCopyFunc(ctx, req, progress)
}

// Options calls OptionsFunc, or returns nil.
func (b *Backend) Options() []sdk.Option {
	if b.OptionsFunc == nil {
		return nil
	}
	return b.OptionsFunc()
}

// Configure calls ConfigureFunc, or accepts cfg.
func (b *Backend) Configure(ctx context.Context, cfg sdk.Config) error {
	if b.ConfigureFunc == nil {
		return nil
	}
	return b.ConfigureFunc(ctx, cfg)
}

func notSet(method string) error {
	return sdk.Errorf(sdk.ErrUnsupported, "mock backend: %sFunc not set", method)
}

// Info calls InfoFunc.
func (b *Backend) Info(ctx context.Context) (sdk.Info, error) {
	if b.InfoFunc == nil {
		return sdk.Info{}, notSet("Info")
	}
	return b.InfoFunc(ctx)
}

// Devices calls DevicesFunc.
func (b *Backend) Devices(ctx context.Context) ([]sdk.Device, error) {
	if b.DevicesFunc == nil {
		return nil, notSet("Devices")
	}
	return b.DevicesFunc(ctx)
}

// DeviceUUID calls DeviceUUIDFunc.
func (b *Backend) DeviceUUID(ctx context.Context, ordinal int) (string, error) {
	if b.DeviceUUIDFunc == nil {
		return "", notSet("DeviceUUID")
	}
	return b.DeviceUUIDFunc(ctx, ordinal)
}

// Allocate calls AllocateFunc.
func (b *Backend) Allocate(ctx context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
	if b.AllocateFunc == nil {
		return 0, 0, notSet("Allocate")
	}
	return b.AllocateFunc(ctx, ordinal, bytes)
}

// Load calls LoadStatsFunc or else LoadFunc.
func (b *Backend) Load(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
	_, err := b.LoadWithStats(ctx, id, extents, progress)
	return err
}

// LoadWithStats calls LoadStatsFunc, or else LoadFunc and returns zero
// stats.
func (b *Backend) LoadWithStats(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) (sdk.LoadStats, error) {
	if b.LoadStatsFunc != nil {
		return b.LoadStatsFunc(ctx, id, extents, progress)
	}
	if b.LoadFunc == nil {
		return sdk.LoadStats{}, notSet("Load")
	}
	return sdk.LoadStats{}, b.LoadFunc(ctx, id, extents, progress)
}

// Export calls ExportFunc.
func (b *Backend) Export(ctx context.Context, id sdk.AllocationID) (sdk.Handle, error) {
	if b.ExportFunc == nil {
		return sdk.Handle{}, notSet("Export")
	}
	return b.ExportFunc(ctx, id)
}

// Import calls ImportFunc.
func (b *Backend) Import(ctx context.Context, ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	if b.ImportFunc == nil {
		return 0, notSet("Import")
	}
	return b.ImportFunc(ctx, ordinal, h)
}

// Read calls ReadFunc.
func (b *Backend) Read(ctx context.Context, id sdk.AllocationID, offset, length uint64) ([]byte, error) {
	if b.ReadFunc == nil {
		return nil, notSet("Read")
	}
	return b.ReadFunc(ctx, id, offset, length)
}

// Digest calls DigestFunc.
func (b *Backend) Digest(ctx context.Context, id sdk.AllocationID, ranges []sdk.Range) ([][32]byte, error) {
	if b.DigestFunc == nil {
		return nil, notSet("Digest")
	}
	return b.DigestFunc(ctx, id, ranges)
}

// Free calls FreeFunc.
func (b *Backend) Free(ctx context.Context, id sdk.AllocationID) error {
	if b.FreeFunc == nil {
		return notSet("Free")
	}
	return b.FreeFunc(ctx, id)
}
