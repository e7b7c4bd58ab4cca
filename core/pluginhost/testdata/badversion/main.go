// Command badversion is a test plugin that completes the go-plugin
// handshake with the wcache cookie but announces the next backend API
// version, as a plugin from a newer wcache release would.
package main

import (
	plugin "github.com/hashicorp/go-plugin"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
)

func main() {
	hs := sdk.HandshakeConfig()
	hs.ProtocolVersion = sdk.APIVersion + 1
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: hs,
		Plugins:         plugin.PluginSet{sdk.PluginName: &sdk.GRPCPlugin{Impl: &mock.Backend{}}},
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          sdk.NewLogger("badversion"),
	})
}
