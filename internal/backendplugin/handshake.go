package backendplugin

import (
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/wcache/wcache/sdk"
)

// The magic cookie tells a backend binary that wcache started it. It is a
// UX check, not a security measure: a backend run by hand prints a short
// explanation and exits 1 instead of waiting for a handshake forever.
const (
	CookieKey   = "WCACHE_BACKEND_PLUGIN"
	CookieValue = "d3b07384-wcache-backend-7c4a8d09"
)

// Name is the name under which a backend is registered in the go-plugin
// plugin set, on both sides.
const Name = "backend"

// HandshakeConfig returns the go-plugin handshake shared by wcache and every
// backend: the magic cookie above and ProtocolVersion = sdk.APIVersion.
// Both sides offer every version of sdk.APIVersions through go-plugin's
// VersionedPlugins and settle on the newest they share; a host refuses a
// plugin that shares none.
func HandshakeConfig() goplugin.HandshakeConfig {
	return goplugin.HandshakeConfig{
		ProtocolVersion:  sdk.APIVersion,
		MagicCookieKey:   CookieKey,
		MagicCookieValue: CookieValue,
	}
}
