// Package pluginhost finds, verifies, starts and supervises wcache backend
// plugins: separate binaries named wcache-backend-NAME that speak the sdk's
// gRPC protocol through hashicorp/go-plugin.
//
// Guarantees:
//   - only gRPC is accepted; the backend API version is negotiated with
//     go-plugin's VersionedPlugins (the newest of Options.APIVersions the
//     plugin speaks too; none: *APIVersionError), and from version 2 on the
//     plugin is configured (Options.BackendOptions) before any other call
//     (a refusal: *ConfigureError);
//   - a plugin file, or the folder holding it, that others can write is
//     refused (*InsecurePluginError); an optional SHA-256 pin is checked
//     before start (ErrChecksumMismatch);
//   - plugin logs are forwarded through go-hclog with their field types
//     (logForwarder), and the last lines are kept to explain a plugin that
//     dies (*ExitError), a Go crash dump shortened to its head;
//   - no plugin outlives its host: Close kills it, and the plugin is started
//     with Pdeathsig=SIGKILL from a thread that lives as long as the plugin,
//     so even a SIGKILLed host leaves no orphan; the socket folder such a
//     host leaves behind is removed by the next Start on the same base.
package pluginhost

import (
	"os"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/internal/defaults"
	"github.com/wcache/wcache/sdk"
)

// Names and places.
const (
	// BinaryPrefix + name is the plugin's file name.
	BinaryPrefix = "wcache-backend-"
	// EnvPluginDir is searched after Options.PluginDir.
	EnvPluginDir = "WCACHE_PLUGIN_DIR"
	// SystemPluginDir is searched last.
	SystemPluginDir = "/usr/lib/wcache/plugins"
	// DefaultStartTimeout bounds the handshake.
	DefaultStartTimeout = 30 * time.Second
	// LogLines is how many of the plugin's last log lines are kept.
	LogLines = 50
)

// Options configure Resolve and Start.
type Options struct {
	// PluginDir is searched first (the --plugin-dir flag). "" skips it.
	PluginDir string
	// SHA256 optionally pins the plugin binary: 64 hex digits. "" skips the
	// check.
	SHA256 string
	// Binary, when set, is the BinaryID of the file a previous start of
	// this plugin ran (Plugin.Binary): a restart refuses another file
	// (*ReplacedError) unless SHA256 pins it. nil: any file that passes
	// the other checks.
	Binary *BinaryID
	// Logger receives the host's messages about the plugin and the
	// plugin's own log lines, under a sub-logger named after the binary.
	// nil → an hclog logger on stderr at level info.
	Logger hclog.Logger
	// Getenv reads $WCACHE_PLUGIN_DIR. nil → os.Getenv.
	Getenv func(string) string
	// Env is appended to the host's environment for the plugin process
	// (e.g. WCACHE_MOCK_DEVICES=4). go-plugin's own variables win.
	Env []string
	// StartTimeout bounds the handshake. 0 → DefaultStartTimeout.
	StartTimeout time.Duration
	// BackendOptions are the --backend-opt KEY=VALUE pairs, sent with the
	// Configure call right after the handshake. The plugin checks them
	// against the schema it declares (unknown keys are refused with the
	// list of known ones: *ConfigureError). A plugin of API version 1
	// takes none (*ConfigureError when any are given). nil → none.
	BackendOptions map[string]string
	// APIVersions are the backend API versions offered in the handshake;
	// the newest one the plugin speaks too is used. nil →
	// sdk.APIVersions(). Tests narrow it to check negotiation.
	APIVersions []int
	// SocketDir is where the plugin's Unix socket folder is created.
	// "" → os.TempDir(), or /tmp when that path is too long for a socket
	// (sun_path holds 107 bytes).
	SocketDir string
}

func (o Options) withDefaults() Options {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = hclog.New(&hclog.LoggerOptions{Name: "wcache", Level: hclog.Info, Output: os.Stderr})
	}
	if o.APIVersions == nil {
		o.APIVersions = sdk.APIVersions()
	}
	defaults.Positive(&o.StartTimeout, DefaultStartTimeout)
	return o
}
