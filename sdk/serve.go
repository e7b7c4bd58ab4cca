package sdk

import (
	"os"
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
	// Logger receives go-plugin's own messages. nil → NewLogger("backend").
	// It must write JSON to the process's original stderr (NewLogger does)
	// for the host to forward the lines with their levels.
	Logger hclog.Logger
	// GRPCServerOptions are passed to grpc.NewServer after the defaults
	// (grpc.MaxRecvMsgSize(MaxRequestBytes)), so they can override them.
	GRPCServerOptions []grpc.ServerOption
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
// (a binary run by hand prints an explanation and exits 1) and announces
// APIVersion in the handshake. A backend's main is:
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
	logger := opts.Logger
	if logger == nil {
		logger = NewLogger("backend")
	}
	serverOpts := opts.GRPCServerOptions
	fds, err := OpenFDChannel(os.Getenv)
	if err != nil {
		logger.Warn("no descriptor channel: descriptor handles cannot reach the host", "error", err)
	}
	if fds != nil {
		defer fds.Close()
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: HandshakeConfig(),
		Plugins:         plugin.PluginSet{PluginName: &GRPCPlugin{Impl: impl, FDs: fds}},
		GRPCServer: func(extra []grpc.ServerOption) *grpc.Server {
			all := append(extra, grpc.MaxRecvMsgSize(MaxRequestBytes))
			return grpc.NewServer(append(all, serverOpts...)...)
		},
		Logger: logger,
	})
}
