package plugin

import (
	"fmt"
	"strings"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/wcache/wcache/sdk"
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
// backend: the magic cookie above and ProtocolVersion = sdk.APIVersion.
// Both sides offer every version of sdk.APIVersions through go-plugin's
// VersionedPlugins and settle on the newest they share; a host refuses a
// plugin that shares none.
func HandshakeConfig() goplugin.HandshakeConfig {
	return goplugin.HandshakeConfig{
		ProtocolVersion:  sdk.APIVersion,
		MagicCookieKey:   HandshakeCookieKey,
		MagicCookieValue: HandshakeCookieValue,
	}
}

// startedByHost reports whether this process was started by a wcache host
// (the magic cookie is in its environment, read through getenv).
func startedByHost(getenv func(string) string) bool {
	return getenv(HandshakeCookieKey) == HandshakeCookieValue
}

// pluginHint is the message a backend binary run by hand prints: binary is
// its file name (wcache-backend-NAME), doc the page that describes it.
func pluginHint(binary, doc string) string {
	name := strings.TrimPrefix(binary, "wcache-backend-")
	return fmt.Sprintf("%s is a wcache backend plugin: wcache starts it (wcache devices --backend %s).\n"+
		"Running it by hand does nothing. See %s.", binary, name, doc)
}
