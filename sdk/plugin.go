package sdk

import (
	"context"
	"errors"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/wcache/wcache/sdk/fdpass"

	backendv1 "github.com/wcache/wcache/proto/wcache/backend/v1"
)

// GRPCPlugin is the go-plugin plugin.GRPCPlugin for a backend. In a plugin
// process Impl is the backend being served; in the host Impl is unused and
// Dispense returns a Backend from NewGRPCClient. net/rpc is not supported:
// the embedded NetRPCUnsupportedPlugin answers its methods with an error.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Backend
	// FDs is the plugin descriptor channel, on either side (nil: none;
	// descriptor handles then cannot cross).
	FDs *fdpass.Channel
	// server, when set (MainConfigured), is registered instead of
	// NewGRPCServer(Impl).
	server backendv1.BackendServer
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers Impl on s. It fails when Impl is nil.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.server != nil {
		backendv1.RegisterBackendServer(s, p.server)
		return nil
	}
	if p.Impl == nil {
		return errors.New("sdk.GRPCPlugin: no backend implementation to serve")
	}
	backendv1.RegisterBackendServer(s, NewGRPCServerWithFDs(p.Impl, p.FDs))
	return nil
}

// GRPCClient returns the host-side Backend for conn.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return NewGRPCClientWithFDs(conn, p.FDs), nil
}
