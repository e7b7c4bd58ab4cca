// Package plugin starts a wcache device backend as a hashicorp/go-plugin
// subprocess: the handshake, gRPC serving, the plugin descriptor channel,
// panic recovery and the parent-death signal. A backend's main is
//
//	func main() { os.Exit(plugin.Serve("acme", acme.New)) }
//
// Serve is the one way to start a plugin; Options tune it. The contract a
// backend implements (sdk.Backend, its types and errors) lives in the sdk
// root package, which a host or an engine links without go-plugin. The
// host starts the plugin with the same handshake (the module's
// internal/backendplugin); a backend author needs nothing of it. See
// docs/writing-a-backend.md.
package plugin

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"

	hclog "github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/wcache/wcache/sdk"
)

// Factory builds the backend a plugin serves from its resolved
// configuration, logging through logger (JSON lines on stderr, which the
// host forwards, at the level it sets in $WCACHE_BACKEND_LOG_LEVEL).
// Without WithSchema cfg has no options (its Getenv reads the environment)
// and the factory runs at start: an error ends the plugin with exit status
// 1, the logged reason shown by the host. With WithSchema it runs when the host's Configure arrives, and an
// error is the answer to it. A backend that can start but not work (no
// driver, say) should rather return a Backend whose calls fail with
// sdk.ErrUnavailable, so that the host can print why.
type Factory func(logger hclog.Logger, cfg sdk.Config) (sdk.Backend, error)

// Option tunes Serve.
type Option func(*settings)

// settings are what the Options set; the zero value is Serve's default.
type settings struct {
	doc                string
	schema             []sdk.Option
	configured         bool
	closeOnTermination bool
	apiVersions        []int
	grpcServerOptions  []grpc.ServerOption
}

// WithDoc names the page a binary run by hand points to. Default: "the
// documentation of the NAME backend".
func WithDoc(page string) Option {
	return func(s *settings) { s.doc = page }
}

// WithSchema declares the backend's configuration schema and defers
// building it until its options are known (a driver library to open, a
// folder to prepare): Serve serves at once, runs the factory when the
// host's Configure arrives (values resolved against schema: --backend-opt,
// then each option's environment variable, then its default), and answers
// Info with schema as the backend's Options. A host that never calls
// Configure (API version 1, or a test through backendtest.StartPlugin)
// gets the backend built from the environment and the defaults at its
// first call. A later Configure with other values is
// sdk.ErrInvalidArgument: options are applied once, at start (the same
// values again are accepted). A schema that sdk.ValidateSchema refuses
// ends the plugin with status 1.
//
// A backend that can be built before its options are known implements
// sdk.Configurable instead and is served without WithSchema.
func WithSchema(schema []sdk.Option) Option {
	return func(s *settings) { s.schema, s.configured = slices.Clone(schema), true }
}

// WithCloseOnTermination makes the plugin release its backend (Close, when
// it is an io.Closer) also when told to end rather than closed by the
// host: on SIGTERM and SIGHUP, and when the host dies, because Serve then
// asks for SIGTERM as the parent-death signal instead of the host's
// SIGKILL. For a backend whose resources outlive its process (files,
// shared memory). The parent-death signal belongs to a thread and only the
// main thread inherited the host's: lock main to it with
// runtime.LockOSThread in an init function of package main. Elsewhere
// Serve logs a warning and a killed host leaves the resources behind.
func WithCloseOnTermination() Option {
	return func(s *settings) { s.closeOnTermination = true }
}

// WithAPIVersions narrows the backend API versions offered to the host,
// which picks the newest it speaks too. Default: sdk.APIVersions(), every
// version this sdk speaks. A version this sdk does not speak, or none at
// all, ends the plugin with status 1 and a log line saying so.
func WithAPIVersions(versions ...int) Option {
	return func(s *settings) { s.apiVersions = slices.Clone(versions) }
}

// WithGRPCServerOptions are passed to grpc.NewServer after the defaults
// (grpc.MaxRecvMsgSize of 256 MiB, the panic-recovering interceptors), so
// they can override them.
func WithGRPCServerOptions(opts ...grpc.ServerOption) Option {
	return func(s *settings) { s.grpcServerOptions = append(s.grpcServerOptions, opts...) }
}

// Serve runs the backend plugin named name (binary wcache-backend-NAME)
// and returns the process exit status, for
//
//	func main() { os.Exit(plugin.Serve("acme", acme.New)) }
//
// Run by hand (no magic cookie in the environment) it prints a hint that
// wcache starts it and returns 1. Otherwise it makes the logger, builds
// the backend with factory (see Factory and WithSchema), serves it over
// gRPC under every offered API version, recovers panics in its methods
// (see sdk.FatalError), and once the host closes the plugin closes the
// backend when it implements io.Closer: 0, or 1 when Close fails. Release
// device memory in Close: the host closing the plugin is the normal way a
// backend ends.
func Serve(name string, factory Factory, opts ...Option) int {
	var s settings
	for _, o := range opts {
		o(&s)
	}
	if !startedByHost(os.Getenv) {
		doc := s.doc
		if doc == "" {
			doc = "the documentation of the " + name + " backend"
		}
		fmt.Fprintln(os.Stderr, pluginHint("wcache-backend-"+name, doc))
		return 1
	}
	logger := newLogger(name)
	versions, err := offered(s.apiVersions)
	if err != nil {
		logger.Error(err.Error())
		return 1
	}
	impl, err := s.build(logger, factory)
	if err != nil {
		logger.Error("cannot start", "error", err)
		return 1
	}
	closer, _ := impl.(io.Closer)
	if s.closeOnTermination && closer != nil {
		closeOnTermination(closer, logger)
	}
	serve(impl, versions, logger, s.grpcServerOptions)
	if closer != nil {
		if err := closer.Close(); err != nil {
			logger.Error("release the backend", "error", err)
			return 1
		}
	}
	return 0
}

// build returns what is served: the backend built now, or with a schema
// the lazy backend that builds it on Configure.
func (s *settings) build(logger hclog.Logger, factory Factory) (sdk.Backend, error) {
	if s.configured {
		if err := sdk.ValidateSchema(s.schema); err != nil {
			return nil, err
		}
		return &lazyBackend{schema: s.schema, build: func(cfg sdk.Config) (sdk.Backend, error) { return factory(logger, cfg) }}, nil
	}
	cfg, err := sdk.ResolveConfig(nil, nil, os.Getenv)
	if err != nil {
		return nil, err
	}
	b, err := factory(logger, cfg)
	if err == nil && b == nil {
		err = fmt.Errorf("the backend's factory returned no backend")
	}
	return b, err
}

// offered checks the versions of WithAPIVersions; nil is every version
// this sdk speaks.
func offered(versions []int) ([]int, error) {
	if versions == nil {
		return sdk.APIVersions(), nil
	}
	if len(versions) == 0 {
		return nil, fmt.Errorf("WithAPIVersions offers no backend API version")
	}
	for _, v := range versions {
		if !slices.Contains(sdk.APIVersions(), v) {
			return nil, fmt.Errorf("WithAPIVersions offers backend API version %d, which this sdk does not speak (it speaks %v)", v, sdk.APIVersions())
		}
	}
	return versions, nil
}

// closeOnTermination closes c and exits 0 on SIGTERM or SIGHUP, and asks
// for SIGTERM when the host dies.
func closeOnTermination(c io.Closer, logger hclog.Logger) {
	// The host's SIGKILL stays in force until this call, so there is no
	// window in which a dying host goes unnoticed.
	if unix.Gettid() != os.Getpid() {
		logger.Warn("not on the main thread; a killed host leaves the backend's resources behind")
	} else if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGTERM), 0, 0, 0); err != nil {
		logger.Warn("cannot set the parent-death signal; a killed host leaves the backend's resources behind", "error", err)
	}
	// When the host is gone, so is the read end of our stderr: a log line
	// would raise SIGPIPE and kill us before Close ran. Ignored, the write
	// fails with EPIPE instead.
	signal.Ignore(unix.SIGPIPE)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGHUP)
	go func() {
		s := <-sigs
		err := c.Close() // first: logging may fail if the host is gone
		logger.Info("signal received, backend released", "signal", s.String())
		if err != nil {
			logger.Error("release the backend", "error", err)
		}
		os.Exit(0)
	}()
}
