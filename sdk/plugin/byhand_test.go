package plugin

import (
	"strings"
	"testing"

	"github.com/wcache/wcache/internal/backendplugin"
)

func TestStartedByHostAndHint(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if startedByHost(getenv) {
		t.Fatal("startedByHost without the cookie")
	}
	env[backendplugin.CookieKey] = "wrong"
	if startedByHost(getenv) {
		t.Fatal("startedByHost with a wrong cookie")
	}
	env[backendplugin.CookieKey] = backendplugin.CookieValue
	if !startedByHost(getenv) {
		t.Fatal("startedByHost with the cookie = false")
	}
	hint := pluginHint("wcache-backend-acme", "docs/acme.md")
	for _, want := range []string{"wcache-backend-acme is a wcache backend plugin", "wcache devices --backend acme", "docs/acme.md"} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint %q lacks %q", hint, want)
		}
	}
}
