// Command badversion is a test plugin that completes the go-plugin
// handshake with the wcache cookie but announces the next backend API
// version, as a plugin from a newer wcache release would. It bypasses
// plugin.Serve, which offers only versions this sdk speaks.
package main

import (
	"os"

	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/wcache/wcache/internal/backendplugin"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
)

func main() {
	hs := backendplugin.HandshakeConfig()
	hs.ProtocolVersion = sdk.APIVersion + 1
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: hs,
		Plugins:         goplugin.PluginSet{backendplugin.Name: &backendplugin.GRPCPlugin{Impl: &mock.Backend{}}},
		GRPCServer:      goplugin.DefaultGRPCServer,
		Logger:          hclog.New(&hclog.LoggerOptions{Name: "badversion", Output: os.Stderr, JSONFormat: true}),
	})
}
