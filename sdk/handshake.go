package sdk

import (
	"fmt"
	"strings"

	plugin "github.com/hashicorp/go-plugin"
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
// backend: the magic cookie above and ProtocolVersion = APIVersion. Both
// sides offer every version of APIVersions through go-plugin's
// VersionedPlugins and settle on the newest they share; a host refuses a
// plugin that shares none.
func HandshakeConfig() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  APIVersion,
		MagicCookieKey:   HandshakeCookieKey,
		MagicCookieValue: HandshakeCookieValue,
	}
}

// Handshake is HandshakeConfig() as a value, for code that wants a variable.
// Treat it as read-only; HandshakeConfig returns a fresh copy.
var Handshake = HandshakeConfig()

// StartedByHost reports whether this process was started by a wcache host
// (the magic cookie is in its environment). A backend's main calls it first
// and, when it is false, prints PluginHint and exits 1, rather than wait
// for a handshake that will never come.
func StartedByHost(getenv func(string) string) bool {
	return getenv(HandshakeCookieKey) == HandshakeCookieValue
}

// PluginHint is the message a backend binary run by hand prints: binary is
// its file name (wcache-backend-NAME), doc the page that describes it.
func PluginHint(binary, doc string) string {
	name := strings.TrimPrefix(binary, "wcache-backend-")
	return fmt.Sprintf("%s is a wcache backend plugin: wcache starts it (wcache devices --backend %s).\n"+
		"Running it by hand does nothing. See %s.", binary, name, doc)
}
