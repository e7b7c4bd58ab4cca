package cli

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/wcache/wcache/core/paths"
)

// layoutFlags are the path template flags shared by every command that
// finds daemons (serve, attach, status, stop, cleanup, launch).
type layoutFlags struct {
	socketTemplate, readyTemplate string
}

// addLayoutFlags registers --socket-template and --ready-template on fs.
func addLayoutFlags(fs *pflag.FlagSet) *layoutFlags {
	f := &layoutFlags{}
	fs.StringVar(&f.socketTemplate, "socket-template", "",
		"socket path template with "+paths.DeviceUUIDPlaceholder+" (default $"+paths.EnvSocketTemplate+
			", else a private directory under $XDG_RUNTIME_DIR or /tmp)")
	// The ready file never follows a custom socket template: without its
	// own template it stays in the default directory (paths.NewLayout).
	fs.StringVar(&f.readyTemplate, "ready-template", "",
		"ready file path template with "+paths.DeviceUUIDPlaceholder+" (default $"+paths.EnvReadyTemplate+
			", else "+paths.DefaultReadyName+" in the private default directory under $XDG_RUNTIME_DIR or /tmp, "+
			"even when the socket template is set; the lock file is this path + "+paths.LockSuffix+")")
	return f
}

// layout resolves the templates (flag, then environment, then default). An
// invalid template — one without {device_uuid} above all — is a usage error
// (exit 2), reported before anything touches the file system.
func (f *layoutFlags) layout() (paths.Layout, error) {
	l, err := paths.NewLayout(paths.Options{SocketTemplate: f.socketTemplate, ReadyTemplate: f.readyTemplate})
	if err != nil {
		return paths.Layout{}, withCode(ExitUsage, fmt.Errorf("path layout: %w", err))
	}
	return l, nil
}
