package plugin

import (
	"os"

	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/wcache/wcache/internal/backendplugin"
	"github.com/wcache/wcache/sdk"
)

// maxRequestBytes bounds one request from the host. gRPC's default of
// 4 MiB is too small for a Load of a checkpoint with tens of thousands of
// tensors (one extent each).
const maxRequestBytes = 256 << 20

// serve serves impl under every version until the host closes the plugin.
func serve(impl sdk.Backend, versions []int, logger hclog.Logger, serverOpts []grpc.ServerOption) {
	fds, err := openFDChannel(os.Getenv)
	if err != nil {
		logger.Warn("no descriptor channel: descriptor handles cannot reach the host", "error", err)
	}
	if fds != nil {
		defer fds.Close()
	}
	rec := &recoverer{logger: logger, exit: os.Exit}
	hs := backendplugin.HandshakeConfig()
	hs.ProtocolVersion = 0 // the versions are VersionedPlugins' keys
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  hs,
		VersionedPlugins: backendplugin.PluginSets(versions, &backendplugin.GRPCPlugin{Impl: impl, FDs: fds}),
		GRPCServer: func(extra []grpc.ServerOption) *grpc.Server {
			all := append(extra, grpc.MaxRecvMsgSize(maxRequestBytes),
				grpc.ChainUnaryInterceptor(rec.unary), grpc.ChainStreamInterceptor(rec.stream))
			return grpc.NewServer(append(all, serverOpts...)...)
		},
		Logger: logger,
	})
}
