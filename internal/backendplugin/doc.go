// Package backendplugin is what a wcache host and a backend plugin agree
// on when hashicorp/go-plugin starts one: the handshake (magic cookie,
// HandshakeConfig), the plugin set that carries the backend protocol over
// gRPC under Name (GRPCPlugin, PluginSets), and the environment variables
// the host sets for the plugin (EnvFDChannel, EnvLogLevel). sdk/plugin's
// Serve is the plugin's side; core/pluginhost and sdk/backendtest start
// plugins with it. A backend author never calls it: plugin.Serve does.
package backendplugin
