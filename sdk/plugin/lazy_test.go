package plugin

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/wcache/wcache/internal/grpcpipe"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
)

// lazyEnv is the variable of the test schema's option; the tests set it
// themselves (t.Setenv), so the environment cannot leak in.
const lazyEnv = "WCACHE_PLUGIN_LAZYTEST_SIZE"

var lazySchema = []sdk.Option{{Name: "size", Type: sdk.OptionSize, Default: "1MiB", Env: lazyEnv}}

// built records what the factory built.
type built struct {
	n      atomic.Int32
	size   atomic.Uint64
	closed atomic.Bool
}

// closingMock is a mock.Backend that records Close.
type closingMock struct {
	*mock.Backend
	b *built
}

func (c closingMock) Close() error { c.b.closed.Store(true); return nil }

// serveLazy serves a lazyBackend through the real gRPC adapters, as
// plugin.Serve does, and returns the host's side of it.
func serveLazy(t *testing.T, fail error) (sdk.Backend, *lazyBackend, *built) {
	t.Helper()
	b := &built{}
	l := &lazyBackend{schema: lazySchema, build: func(cfg sdk.Config) (sdk.Backend, error) {
		b.n.Add(1)
		if fail != nil {
			return nil, fail
		}
		b.size.Store(cfg.Size("size"))
		return closingMock{b: b, Backend: &mock.Backend{
			InfoFunc: func(context.Context) (sdk.Info, error) { return sdk.Info{Name: "lazy"}, nil },
			LoadStatsFunc: func(context.Context, sdk.AllocationID, []sdk.Extent, sdk.ProgressFunc) (sdk.LoadStats, error) {
				return sdk.LoadStats{Bytes: 42, Chunks: 1}, nil
			},
		}}, nil
	}}
	host, _ := grpcpipe.Connect(t, l)
	return host, l, b
}

func TestLazyBackendIsBuiltOnConfigureOnce(t *testing.T) {
	t.Setenv(lazyEnv, "")
	host, l, b := serveLazy(t, nil)
	ctx := context.Background()
	if err := sdk.Configure(ctx, host, map[string]string{"size": "2MiB"}); err != nil {
		t.Fatal(err)
	}
	if b.n.Load() != 1 || b.size.Load() != 2<<20 {
		t.Fatalf("built %d times with size %d, want once with 2MiB", b.n.Load(), b.size.Load())
	}
	// The same values again are accepted; others are refused, typed.
	if err := sdk.Configure(ctx, host, map[string]string{"size": "2MiB"}); err != nil {
		t.Fatalf("the same configuration again: %v", err)
	}
	err := sdk.Configure(ctx, host, map[string]string{"size": "3MiB"})
	if !errors.Is(err, sdk.ErrInvalidArgument) || !strings.Contains(err.Error(), "applied once") {
		t.Fatalf("another configuration = %v, want ErrInvalidArgument saying options are applied once", err)
	}
	// An unknown key never reaches the factory.
	if err := sdk.Configure(ctx, host, map[string]string{"colour": "red"}); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Fatalf("unknown key = %v, want ErrInvalidArgument", err)
	}
	if b.n.Load() != 1 {
		t.Fatalf("built %d times, want once", b.n.Load())
	}
	// Info carries the schema; Load forwards the built backend's stats.
	info, err := host.Info(ctx)
	if err != nil || info.Name != "lazy" || len(info.Options) != 1 || info.Options[0].Name != "size" {
		t.Fatalf("Info = %+v, %v; want the built backend's, with the schema", info, err)
	}
	stats, err := host.(sdk.StatsLoader).LoadWithStats(ctx, 1, nil, nil)
	if err != nil || stats.Bytes != 42 {
		t.Fatalf("LoadWithStats = %+v, %v; want the built backend's stats", stats, err)
	}
	if err := l.Close(); err != nil || !b.closed.Load() {
		t.Fatalf("Close = %v, closed %v; want the built backend closed", err, b.closed.Load())
	}
}

func TestLazyBackendWithoutConfigureReadsTheEnvironment(t *testing.T) {
	t.Setenv(lazyEnv, "5MiB")
	host, _, b := serveLazy(t, nil)
	if _, err := host.Info(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b.n.Load() != 1 || b.size.Load() != 5<<20 {
		t.Fatalf("built %d times with size %d, want once with $%s (5MiB)", b.n.Load(), b.size.Load(), lazyEnv)
	}
}

func TestLazyBackendKeepsTheFactoryError(t *testing.T) {
	t.Setenv(lazyEnv, "")
	boom := sdk.Errorf(sdk.ErrUnavailable, "no driver")
	host, l, b := serveLazy(t, boom)
	ctx := context.Background()
	if err := sdk.Configure(ctx, host, nil); !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("Configure = %v, want the factory's error", err)
	}
	if _, err := host.Devices(ctx); !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "no driver") {
		t.Fatalf("Devices after a failed build = %v, want the factory's error", err)
	}
	if b.n.Load() != 1 {
		t.Fatalf("factory ran %d times, want once", b.n.Load())
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close of an unbuilt backend = %v", err)
	}
}

func TestOfferedVersions(t *testing.T) {
	if v, err := offered(nil); err != nil || len(v) != len(sdk.APIVersions()) {
		t.Fatalf("offered(nil) = %v, %v; want every version", v, err)
	}
	if _, err := offered([]int{}); err == nil {
		t.Fatal("offered(none) succeeded")
	}
	if _, err := offered([]int{sdk.APIVersion + 1}); err == nil || !strings.Contains(err.Error(), "does not speak") {
		t.Fatalf("offered(next) = %v, want a version this sdk does not speak", err)
	}
}
