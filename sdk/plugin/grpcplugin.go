package plugin

import (
	"context"
	"errors"
	"github.com/wcache/wcache/internal/backendrpc"
	"os"

	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/wcache/wcache/internal/fdpass"
	backendv1 "github.com/wcache/wcache/proto/wcache/backend/v1"
	"github.com/wcache/wcache/sdk"
)

// MaxRequestBytes bounds one request from the host. gRPC's default of
// 4 MiB is too small for a Load of a checkpoint with tens of thousands of
// tensors (one extent each).
const MaxRequestBytes = 256 << 20

// GRPCPlugin is the go-plugin plugin.GRPCPlugin for a backend. In a plugin
// process Impl is the backend being served; in the host Impl is unused and
// Dispense returns an sdk.Backend from backendrpc.NewClientWithFDs. net/rpc
// is not supported: the embedded NetRPCUnsupportedPlugin answers its
// methods with an error.
type GRPCPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	Impl sdk.Backend
	// FDs is the plugin descriptor channel, on either side (nil: none;
	// descriptor handles then cannot cross).
	FDs *fdpass.Channel
}

var _ goplugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers Impl on s. It fails when Impl is nil.
func (p *GRPCPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("plugin.GRPCPlugin: no backend implementation to serve")
	}
	backendv1.RegisterBackendServer(s, backendrpc.NewServerWithFDs(p.Impl, p.FDs))
	return nil
}

// GRPCClient returns the host-side Backend for conn.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return backendrpc.NewClientWithFDs(conn, p.FDs), nil
}

// HostPlugins is what a host passes as go-plugin's
// ClientConfig.VersionedPlugins: for each of versions the plugin set whose
// PluginName dispenses an sdk.Backend talking gRPC to the plugin, with
// descriptor handles on fds (nil: none).
func HostPlugins(versions []int, fds *fdpass.Channel) map[int]goplugin.PluginSet {
	sets := make(map[int]goplugin.PluginSet, len(versions))
	for _, v := range versions {
		sets[v] = goplugin.PluginSet{PluginName: &GRPCPlugin{FDs: fds}}
	}
	return sets
}

// serve serves impl under every version until the host closes the plugin.
func serve(impl sdk.Backend, versions []int, logger hclog.Logger, serverOpts []grpc.ServerOption) {
	fds, err := openFDChannel(os.Getenv)
	if err != nil {
		logger.Warn("no descriptor channel: descriptor handles cannot reach the host", "error", err)
	}
	if fds != nil {
		defer fds.Close()
	}
	// Every version's set shares one GRPCPlugin.
	p := &GRPCPlugin{Impl: impl, FDs: fds}
	sets := make(map[int]goplugin.PluginSet, len(versions))
	for _, v := range versions {
		sets[v] = goplugin.PluginSet{PluginName: p}
	}
	rec := &recoverer{logger: logger, exit: os.Exit}
	hs := HandshakeConfig()
	hs.ProtocolVersion = 0 // the versions are VersionedPlugins' keys
	goplugin.Serve(&goplugin.ServeConfig{
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
