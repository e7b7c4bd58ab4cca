package plugin

import (
	"fmt"
	"strings"

	"github.com/wcache/wcache/internal/backendplugin"
)

// startedByHost reports whether this process was started by a wcache host
// (the magic cookie is in its environment, read through getenv).
func startedByHost(getenv func(string) string) bool {
	return getenv(backendplugin.CookieKey) == backendplugin.CookieValue
}

// pluginHint is the message a backend binary run by hand prints: binary is
// its file name (wcache-backend-NAME), doc the page that describes it.
func pluginHint(binary, doc string) string {
	name := strings.TrimPrefix(binary, "wcache-backend-")
	return fmt.Sprintf("%s is a wcache backend plugin: wcache starts it (wcache devices --backend %s).\n"+
		"Running it by hand does nothing. See %s.", binary, name, doc)
}
