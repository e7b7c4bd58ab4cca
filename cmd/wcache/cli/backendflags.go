package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/wcache/wcache/core/pluginhost"
	"github.com/wcache/wcache/sdk"
)

// Environment defaults of the backend flags.
const (
	// envBackend is the default of --backend.
	envBackend = "WCACHE_BACKEND"
	// envLogLevel sets the level of the host logger that forwards plugin
	// logs to stderr (trace, debug, info, warn, error; default warn).
	envLogLevel = "WCACHE_LOG_LEVEL"
	// defaultBackend is used when neither --backend nor $WCACHE_BACKEND is set.
	defaultBackend = "cuda"
)

// backendFlags are the flags of every command that starts a backend plugin
// (devices, serve, launch, attach).
type backendFlags struct {
	name, pluginDir, sha256 string
	opts                    []string // --backend-opt KEY=VALUE, as given
}

// addBackendFlags registers --backend, --plugin-dir and --plugin-sha256.
// The default of --backend is $WCACHE_BACKEND, else defaultBackend, so
// f.name always names a backend after parsing.
func addBackendFlags(fs *pflag.FlagSet) *backendFlags {
	f := &backendFlags{}
	def := strings.TrimSpace(os.Getenv(envBackend))
	if def == "" {
		def = defaultBackend
	}
	fs.StringVar(&f.name, "backend", def,
		"device backend: the plugin wcache-backend-NAME, e.g. cuda, rocm, mock ($"+envBackend+" sets the default)")
	fs.StringVar(&f.pluginDir, "plugin-dir", "",
		"folder searched first for backend plugins (then $"+pluginhost.EnvPluginDir+", the folder of wcache, "+pluginhost.SystemPluginDir+")")
	fs.StringVar(&f.sha256, "plugin-sha256", "",
		"refuse to start the backend plugin unless its SHA-256 is this (64 hex digits)")
	fs.StringArrayVar(&f.opts, "backend-opt", nil,
		"KEY=VALUE option for the backend plugin, repeatable; wins over the option's environment variable "+
			"(the keys, types and defaults: wcache devices --backend NAME --describe)")
	return f
}

// backendOptions parses --backend-opt: KEY=VALUE each, KEY not empty and
// given once. The plugin checks the keys against its schema.
func (f *backendFlags) backendOptions() (map[string]string, error) {
	if len(f.opts) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(f.opts))
	for _, kv := range f.opts {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, usageErrorf("--backend-opt %q: want KEY=VALUE", kv)
		}
		if _, dup := out[k]; dup {
			return nil, usageErrorf("--backend-opt %s given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// backendName is the backend the flags select (--backend, else
// $WCACHE_BACKEND, else defaultBackend).
func (f *backendFlags) backendName() string { return f.name }

// start starts the backend plugin with its log lines going to e.stderr
// through an hclog logger at $WCACHE_LOG_LEVEL (default warn). See
// startPlugin.
func (f *backendFlags) start(ctx context.Context, e *env) (*pluginhost.Plugin, error) {
	return f.startPlugin(ctx, hostLogger(e), nil)
}

// startPlugin starts the backend plugin, forwarding its log lines through
// logger. A malformed name or pin is a usage error (exit 2); a missing,
// insecure or broken plugin exits 1 with pluginhost's explanation. The
// caller must Close the plugin (no plugin outlives wcache even if it does
// not: pluginhost starts it with a parent-death signal). binary, for a
// restart, is the file the first start ran: another one is refused unless
// --plugin-sha256 pins it.
func (f *backendFlags) startPlugin(ctx context.Context, logger hclog.Logger, binary *pluginhost.BinaryID) (*pluginhost.Plugin, error) {
	name := f.name
	if err := pluginhost.ValidateName(name); err != nil {
		return nil, withCode(ExitUsage, fmt.Errorf("--backend: %w", err))
	}
	if f.sha256 != "" && !isHexSHA256(f.sha256) {
		return nil, usageErrorf("--plugin-sha256 %q: want 64 hex digits", f.sha256)
	}
	opts, err := f.backendOptions()
	if err != nil {
		return nil, err
	}
	p, err := pluginhost.Start(ctx, name, pluginhost.Options{
		PluginDir:      f.pluginDir,
		SHA256:         f.sha256,
		Binary:         binary,
		Logger:         logger,
		BackendOptions: opts,
	})
	if err != nil {
		if errors.Is(err, pluginhost.ErrPluginNotFound) {
			return nil, fmt.Errorf("backend %q: %w", name, err)
		}
		if len(opts) > 0 && errors.Is(err, pluginhost.ErrConfigure) && errors.Is(err, sdk.ErrInvalidArgument) {
			// The plugin refused what was given (an unknown key, a malformed
			// value): a usage error. A bad variable alone stays exit 1.
			return nil, withCode(ExitUsage, fmt.Errorf("--backend-opt: backend %q: %w", name, err))
		}
		return nil, fmt.Errorf("start backend %q: %w", name, err)
	}
	return p, nil
}

// hostLogger writes wcache's and the plugins' log lines to e.stderr.
func hostLogger(e *env) hclog.Logger {
	level := hclog.LevelFromString(os.Getenv(envLogLevel))
	if level == hclog.NoLevel {
		level = hclog.Warn
	}
	return hclog.New(&hclog.LoggerOptions{Name: "wcache", Level: level, Output: e.stderr})
}

// progressLogger logs a command's progress lines (not a daemon's: serve
// has its own) to e.stderr at info, whatever $WCACHE_LOG_LEVEL says about
// plugin logs.
func progressLogger(e *env) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "wcache", Level: hclog.Info, Output: e.stderr})
}

func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F') {
			return false
		}
	}
	return true
}
