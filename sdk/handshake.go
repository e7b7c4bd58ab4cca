package sdk

import (
	plugin "github.com/hashicorp/go-plugin"

	"github.com/wcache/wcache/internal/version"
)

// The magic cookie tells a backend binary that wcache started it. It is a
// UX check, not a security measure: a backend run by hand prints a short
// explanation and exits 1 instead of waiting for a handshake forever.
const (
	HandshakeCookieKey   = "WCACHE_BACKEND_PLUGIN"
	HandshakeCookieValue = "d3b07384-wcache-backend-7c4a8d09"
)

// PluginName is the name under which a backend is registered in the
// go-plugin plugin set, on both sides.
const PluginName = "backend"

// HandshakeConfig returns the go-plugin handshake shared by wcache and every
// backend: the magic cookie above and ProtocolVersion =
// version.BackendAPIVersion. A host refuses a plugin that answers with a
// different API version.
func HandshakeConfig() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  version.BackendAPIVersion,
		MagicCookieKey:   HandshakeCookieKey,
		MagicCookieValue: HandshakeCookieValue,
	}
}

// Handshake is HandshakeConfig() as a value, for code that wants a variable.
// Treat it as read-only; HandshakeConfig returns a fresh copy.
var Handshake = HandshakeConfig()
