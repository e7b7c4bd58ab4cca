package plugin

import (
	"os"
	"strings"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/internal/backendplugin"
)

// newLogger returns the logger Serve hands the factory: hclog, JSON lines
// on the process's stderr, at the level named by $WCACHE_BACKEND_LOG_LEVEL
// (default debug). The host parses each line and re-logs it through its
// own go-hclog logger, named after the plugin binary, and keeps the last
// lines to report them if the plugin dies.
//
// It is made before serving: go-plugin redirects os.Stderr, and a logger
// created afterwards would write into go-plugin's stdio stream instead.
func newLogger(name string) hclog.Logger {
	level := hclog.LevelFromString(strings.TrimSpace(os.Getenv(backendplugin.EnvLogLevel)))
	if level == hclog.NoLevel {
		level = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      level,
		Output:     os.Stderr,
		JSONFormat: true,
	})
}
