package sdk

import (
	"fmt"
	"os"
	"slices"
	"strings"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// EnvLogLevel names the variable the host sets to the level it forwards
// (trace, debug, info, warn, error). NewLogger honours it; default "debug".
const EnvLogLevel = "WCACHE_BACKEND_LOG_LEVEL"

// MaxRequestBytes bounds one request from the host. gRPC's default of
// 4 MiB is too small for a Load of a checkpoint with tens of thousands of
// tensors (one extent each).
const MaxRequestBytes = 256 << 20

// ServeOptions tunes ServeWith. The zero value is what Serve uses.
type ServeOptions struct {
	// Logger receives go-plugin's own messages and the reports of
	// recovered panics. nil → NewLogger("backend"). It must write JSON to
	// the process's original stderr (NewLogger does) for the host to
	// forward the lines with their levels.
	Logger hclog.Logger
	// GRPCServerOptions are passed to grpc.NewServer after the defaults
	// (grpc.MaxRecvMsgSize(MaxRequestBytes), the panic-recovering
	// interceptors), so they can override them.
	GRPCServerOptions []grpc.ServerOption
	// APIVersions are the backend API versions offered to the host, which
	// picks the newest it speaks too. nil → APIVersions(), every version
	// this sdk speaks. A version this sdk does not speak ends the plugin
	// with status 1 and a log line saying so.
	APIVersions []int
}

// NewLogger returns the logger a backend should use: hclog, JSON lines on
// the process's stderr, at the level named by $WCACHE_BACKEND_LOG_LEVEL
// (default debug). The host parses each line and re-logs it through its own
// go-hclog logger, named after the plugin binary, and keeps the last lines
// to report them if the plugin dies.
//
// Call it before Serve: Serve redirects os.Stderr, and a logger created
// afterwards would write into go-plugin's stdio stream instead.
func NewLogger(name string) hclog.Logger {
	level := hclog.LevelFromString(strings.TrimSpace(os.Getenv(EnvLogLevel)))
	if level == hclog.NoLevel {
		level = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      level,
		Output:     os.Stderr,
		JSONFormat: true,
	})
}

// Serve runs impl as a wcache backend plugin and returns when the host
// closes the connection. It speaks gRPC only, checks the magic cookie
// (a binary run by hand prints an explanation and exits 1), offers every
// version of APIVersions in the handshake, and recovers panics in impl's
// methods (see Fatal). A backend's main is:
//
//	func main() { sdk.Serve(mybackend.New()) }
//
// Release device memory after Serve returns (defer in main): the host
// closing the plugin is the normal way a backend ends.
func Serve(impl Backend) {
	ServeWith(impl, ServeOptions{})
}

// ServeWith is Serve with options.
func ServeWith(impl Backend, opts ServeOptions) {
	servePlugin(&GRPCPlugin{Impl: impl}, opts)
}

// servePlugin serves p under every offered API version.
func servePlugin(p *GRPCPlugin, opts ServeOptions) {
	logger := opts.Logger
	if logger == nil {
		logger = NewLogger("backend")
	}
	versions := opts.APIVersions
	if versions == nil {
		versions = APIVersions()
	}
	sets := map[int]plugin.PluginSet{}
	for _, v := range versions {
		if !slices.Contains(APIVersions(), v) {
			logger.Error(fmt.Sprintf("ServeOptions.APIVersions offers backend API version %d, which this sdk does not speak (it speaks %v)", v, APIVersions()))
			os.Exit(1)
		}
		sets[v] = plugin.PluginSet{PluginName: p}
	}
	if len(sets) == 0 {
		logger.Error("ServeOptions.APIVersions offers no backend API version")
		os.Exit(1)
	}
	serverOpts := opts.GRPCServerOptions
	fds, err := OpenFDChannel(os.Getenv)
	if err != nil {
		logger.Warn("no descriptor channel: descriptor handles cannot reach the host", "error", err)
	}
	if fds != nil {
		defer fds.Close()
	}
	// Set before serving: every version's set shares p.
	p.FDs = fds
	if l, ok := p.server.(*lazyServer); ok {
		l.fds = fds
	}
	rec := &recoverer{logger: logger, exit: os.Exit}
	hs := HandshakeConfig()
	hs.ProtocolVersion = 0 // the versions are VersionedPlugins' keys
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  hs,
		VersionedPlugins: sets,
		GRPCServer: func(extra []grpc.ServerOption) *grpc.Server {
			all := append(extra, grpc.MaxRecvMsgSize(MaxRequestBytes),
				grpc.ChainUnaryInterceptor(rec.unary), grpc.ChainStreamInterceptor(rec.stream))
			return grpc.NewServer(append(all, serverOpts...)...)
		},
		Logger: logger,
	})
}
