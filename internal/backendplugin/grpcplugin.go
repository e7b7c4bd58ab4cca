package backendplugin

import (
	"context"
	"errors"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/wcache/wcache/internal/backendrpc"
	"github.com/wcache/wcache/internal/fdpass"
	backendv1 "github.com/wcache/wcache/proto/wcache/backend/v1"
	"github.com/wcache/wcache/sdk"
)

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
		return errors.New("backendplugin.GRPCPlugin: no backend implementation to serve")
	}
	backendv1.RegisterBackendServer(s, backendrpc.NewServerWithFDs(p.Impl, p.FDs))
	return nil
}

// GRPCClient returns the host-side Backend for conn.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return backendrpc.NewClientWithFDs(conn, p.FDs), nil
}

// PluginSets is go-plugin's VersionedPlugins on either side: for each of
// versions the plugin set that registers p under Name. A host passes a
// GRPCPlugin with only FDs set (Dispense then returns an sdk.Backend
// talking gRPC to the plugin); a plugin passes the backend it serves as
// Impl.
func PluginSets(versions []int, p *GRPCPlugin) map[int]goplugin.PluginSet {
	sets := make(map[int]goplugin.PluginSet, len(versions))
	for _, v := range versions {
		sets[v] = goplugin.PluginSet{Name: p}
	}
	return sets
}
