package plugin

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/wcache/wcache/sdk"
)

// lazyBackend is what Serve serves for a backend declared WithSchema: an
// sdk.Configurable whose Configure builds the real backend from its
// resolved configuration, and which forwards every other call to it
// (building it from the environment and the defaults when no Configure
// came first). It implements the optional interfaces the gRPC adapter
// looks for (sdk.Configurable, sdk.StatsLoader, sdk.PeerCopier) and io.Closer, so that
// the built backend is seen as if it were served directly; a new Backend
// method fails to compile here until it is forwarded.
type lazyBackend struct {
	schema []sdk.Option
	build  func(sdk.Config) (sdk.Backend, error)

	mu    sync.Mutex
	impl  sdk.Backend
	built sdk.Config // what impl was built with
	err   error      // the build's error, returned to every later call
}

var (
	_ sdk.Backend      = (*lazyBackend)(nil)
	_ sdk.Configurable = (*lazyBackend)(nil)
	_ sdk.StatsLoader  = (*lazyBackend)(nil)
	_ sdk.PeerCopier   = (*lazyBackend)(nil)
	_ io.Closer        = (*lazyBackend)(nil)
)

// get returns the built backend, building it from the environment and the
// defaults when no Configure came first.
func (l *lazyBackend) get() (sdk.Backend, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.impl == nil && l.err == nil {
		cfg, err := sdk.ResolveConfig(l.schema, nil, os.Getenv)
		if err == nil {
			err = l.buildLocked(cfg)
		}
		l.err = err
	}
	return l.impl, l.err
}

func (l *lazyBackend) buildLocked(cfg sdk.Config) error {
	b, err := l.build(cfg)
	if err != nil {
		return err
	}
	if b == nil {
		return errors.New("the backend's factory returned no backend")
	}
	l.impl, l.built = b, cfg
	return nil
}

// Options is the schema given to WithSchema.
func (l *lazyBackend) Options() []sdk.Option { return slices.Clone(l.schema) }

// Configure builds the backend with cfg (already resolved against the
// schema by the adapter). The configuration it was built with again is
// accepted; another one is sdk.ErrInvalidArgument; after a failed build
// every call returns that build's error.
func (l *lazyBackend) Configure(_ context.Context, cfg sdk.Config) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.err != nil:
		return l.err
	case l.impl != nil && l.sameValues(cfg):
		return nil // what it was built with
	case l.impl != nil:
		return sdk.Errorf(sdk.ErrInvalidArgument, "the backend is already built with another configuration: options are applied once, at start")
	}
	if err := l.buildLocked(cfg); err != nil {
		l.err = err
		return err
	}
	return nil
}

// sameValues reports whether cfg resolves every option as the built
// backend's configuration did.
func (l *lazyBackend) sameValues(cfg sdk.Config) bool {
	for _, o := range l.schema {
		if cfg.Value(o.Name) != l.built.Value(o.Name) {
			return false
		}
	}
	return true
}

// Close closes the built backend when it is an io.Closer.
func (l *lazyBackend) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.impl.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func (l *lazyBackend) Info(ctx context.Context) (sdk.Info, error) {
	b, err := l.get()
	if err != nil {
		return sdk.Info{}, err
	}
	return b.Info(ctx)
}

func (l *lazyBackend) Devices(ctx context.Context) ([]sdk.Device, error) {
	b, err := l.get()
	if err != nil {
		return nil, err
	}
	return b.Devices(ctx)
}

func (l *lazyBackend) DeviceUUID(ctx context.Context, ordinal int) (string, error) {
	b, err := l.get()
	if err != nil {
		return "", err
	}
	return b.DeviceUUID(ctx, ordinal)
}

func (l *lazyBackend) Allocate(ctx context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
	b, err := l.get()
	if err != nil {
		return 0, 0, err
	}
	return b.Allocate(ctx, ordinal, bytes)
}

func (l *lazyBackend) Load(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
	_, err := l.LoadWithStats(ctx, id, extents, progress)
	return err
}

// LoadWithStats forwards to the built backend's LoadWithStats when it
// has one (sdk.LoadWithStats).
func (l *lazyBackend) LoadWithStats(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) (sdk.LoadStats, error) {
	b, err := l.get()
	if err != nil {
		return sdk.LoadStats{}, err
	}
	return sdk.LoadWithStats(ctx, b, id, extents, progress)
}

// PeerCopy forwards to the built backend's PeerCopy (sdk.PeerCopy:
// ErrUnsupported when it has none).
func (l *lazyBackend) PeerCopy(ctx context.Context, req sdk.PeerCopyRequest, progress sdk.ProgressFunc) (sdk.PeerCopyResult, error) {
	b, err := l.get()
	if err != nil {
		return sdk.PeerCopyResult{}, err
	}
	return sdk.PeerCopy(ctx, b, req, progress)
}

func (l *lazyBackend) Export(ctx context.Context, id sdk.AllocationID) (sdk.Handle, error) {
	b, err := l.get()
	if err != nil {
		return sdk.Handle{}, err
	}
	return b.Export(ctx, id)
}

func (l *lazyBackend) Import(ctx context.Context, ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	b, err := l.get()
	if err != nil {
		return 0, err
	}
	return b.Import(ctx, ordinal, h)
}

func (l *lazyBackend) Read(ctx context.Context, id sdk.AllocationID, offset, length uint64) ([]byte, error) {
	b, err := l.get()
	if err != nil {
		return nil, err
	}
	return b.Read(ctx, id, offset, length)
}

func (l *lazyBackend) Digest(ctx context.Context, id sdk.AllocationID, ranges []sdk.Range) ([][32]byte, error) {
	b, err := l.get()
	if err != nil {
		return nil, err
	}
	return b.Digest(ctx, id, ranges)
}

func (l *lazyBackend) Free(ctx context.Context, id sdk.AllocationID) error {
	b, err := l.get()
	if err != nil {
		return err
	}
	return b.Free(ctx, id)
}
