package sdk

import (
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"sync"

	hclog "github.com/hashicorp/go-hclog"

	backendv1 "github.com/wcache/wcache/proto/wcache/backend/v1"
	"github.com/wcache/wcache/sdk/fdpass"
)

// ConfigFactory builds the backend a plugin serves from its resolved
// configuration, logging through logger. An error is the answer to the
// host's Configure (or to the first call of a host that does not
// configure): the host prints it and stops the plugin.
type ConfigFactory func(logger hclog.Logger, cfg Config) (Backend, error)

// MainConfigured is MainWith for a backend that needs its options before
// it can be built (a driver library to open, a folder to prepare): it
// serves at once, builds the backend with factory when the host's
// Configure arrives (values resolved against schema: --backend-opt, then
// each option's environment variable, then its default), and answers Info
// with schema as the backend's Options. A host that never calls Configure
// (API version 1, or a test through backendtest.StartPlugin) gets the
// backend built from the environment and the defaults at its first call. A
// later Configure with other values is ErrInvalidArgument: options are
// applied once, at start (the same values again are accepted). A schema that ValidateSchema refuses ends the plugin with status
// 1.
func MainConfigured(name string, schema []Option, factory ConfigFactory, opts MainOptions) int {
	return mainWith(name, opts, func(logger hclog.Logger) (*GRPCPlugin, io.Closer, error) {
		if err := ValidateSchema(schema); err != nil {
			return nil, nil, err
		}
		l := &lazyServer{schema: schema, build: func(cfg Config) (Backend, error) { return factory(logger, cfg) }}
		return &GRPCPlugin{server: l}, l, nil
	})
}

// lazyServer serves backend.v1 for a backend built on Configure. It
// forwards every RPC to the real adapter (NewGRPCServer of the built
// backend), so that optional interfaces of the backend are seen as if it
// were served directly. It embeds UnsafeBackendServer, not the
// Unimplemented one: a new RPC in backend.v1 fails to compile here until
// it is forwarded.
type lazyServer struct {
	backendv1.UnsafeBackendServer
	schema []Option
	build  func(Config) (Backend, error)
	// fds is the plugin descriptor channel (set by servePlugin before it
	// serves; nil: none).
	fds *fdpass.Channel

	mu    sync.Mutex
	impl  Backend
	inner backendv1.BackendServer
	built Config // what impl was built with
	err   error  // the build's error, returned to every later call
}

// get returns the adapter, building the backend from the environment and
// the defaults when no Configure came first.
func (l *lazyServer) get() (backendv1.BackendServer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inner == nil && l.err == nil {
		cfg, err := ResolveConfig(l.schema, nil, os.Getenv)
		if err == nil {
			err = l.buildLocked(cfg)
		}
		l.err = err
	}
	return l.inner, l.err
}

func (l *lazyServer) buildLocked(cfg Config) error {
	b, err := l.build(cfg)
	if err != nil {
		return err
	}
	if b == nil {
		return errors.New("the backend's factory returned no backend")
	}
	l.impl, l.inner, l.built = b, NewGRPCServerWithFDs(b, l.fds), cfg
	return nil
}

// Close closes the built backend when it is an io.Closer.
func (l *lazyServer) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.impl.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func (l *lazyServer) Configure(ctx context.Context, req *backendv1.ConfigureRequest) (*backendv1.ConfigureResponse, error) {
	cfg, err := ResolveConfig(l.schema, req.GetValues(), os.Getenv)
	if err != nil {
		return nil, toStatus(err) // refused before anything is built
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.err != nil:
		return nil, toStatus(l.err)
	case l.inner != nil && maps.Equal(cfg.values, l.built.values):
		return &backendv1.ConfigureResponse{}, nil // what it was built with
	case l.inner != nil:
		return nil, toStatus(Errorf(ErrInvalidArgument, "the backend is already built with another configuration: options are applied once, at start"))
	}
	if err := l.buildLocked(cfg); err != nil {
		l.err = err
		return nil, toStatus(err)
	}
	return &backendv1.ConfigureResponse{}, nil
}

func (l *lazyServer) Info(ctx context.Context, req *backendv1.InfoRequest) (*backendv1.InfoResponse, error) {
	s, err := l.get()
	if err != nil {
		return nil, toStatus(err)
	}
	resp, err := s.Info(ctx, req)
	if err != nil {
		return nil, err
	}
	resp.Options = optionsToProto(l.schema)
	return resp, nil
}

func (l *lazyServer) Devices(ctx context.Context, req *backendv1.DevicesRequest) (*backendv1.DevicesResponse, error) {
	s, err := l.get()
	if err != nil {
		return nil, toStatus(err)
	}
	return s.Devices(ctx, req)
}

func (l *lazyServer) GetDeviceUUID(ctx context.Context, req *backendv1.GetDeviceUUIDRequest) (*backendv1.GetDeviceUUIDResponse, error) {
	s, err := l.get()
	if err != nil {
		return nil, toStatus(err)
	}
	return s.GetDeviceUUID(ctx, req)
}

func (l *lazyServer) Allocate(ctx context.Context, req *backendv1.AllocateRequest) (*backendv1.AllocateResponse, error) {
	s, err := l.get()
	if err != nil {
		return nil, toStatus(err)
	}
	return s.Allocate(ctx, req)
}

func (l *lazyServer) Load(req *backendv1.LoadRequest, stream backendv1.Backend_LoadServer) error {
	s, err := l.get()
	if err != nil {
		return toStatus(err)
	}
	return s.Load(req, stream)
}

func (l *lazyServer) Export(ctx context.Context, req *backendv1.ExportRequest) (*backendv1.ExportResponse, error) {
	s, err := l.get()
	if err != nil {
		return nil, toStatus(err)
	}
	return s.Export(ctx, req)
}

func (l *lazyServer) Import(ctx context.Context, req *backendv1.ImportRequest) (*backendv1.ImportResponse, error) {
	s, err := l.get()
	if err != nil {
		return nil, toStatus(err)
	}
	return s.Import(ctx, req)
}

func (l *lazyServer) Read(ctx context.Context, req *backendv1.ReadRequest) (*backendv1.ReadResponse, error) {
	s, err := l.get()
	if err != nil {
		return nil, toStatus(err)
	}
	return s.Read(ctx, req)
}

func (l *lazyServer) Digest(ctx context.Context, req *backendv1.DigestRequest) (*backendv1.DigestResponse, error) {
	s, err := l.get()
	if err != nil {
		return nil, toStatus(err)
	}
	return s.Digest(ctx, req)
}

func (l *lazyServer) Free(ctx context.Context, req *backendv1.FreeRequest) (*backendv1.FreeResponse, error) {
	s, err := l.get()
	if err != nil {
		return nil, toStatus(err)
	}
	return s.Free(ctx, req)
}
