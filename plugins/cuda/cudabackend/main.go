package cudabackend

import (
	"os"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/plugin"
)

// Main runs the CUDA backend as a wcache plugin through sdk/plugin.Serve and
// returns the process exit status: 0 after the host closed the plugin, 1
// when run by hand or when the configuration (WCACHE_CUDA_*) is invalid.
//
// When the driver cannot be used (library or symbol missing, cuInit
// failing, no visible device) the plugin still serves, and every call but
// Info answers with that reason wrapped in sdk.ErrUnavailable, so that
// `wcache devices --backend cuda` prints it. Device memory, staging
// buffers and contexts are released after the host closes the plugin; a
// killed plugin's device memory is reclaimed by the driver when the
// process ends, so no cleanup is left to anyone else. A sticky CUDA error
// (see driver.Result.Sticky) ends the process with sdk.ExitFatal after
// logging it; every cfg.HealthInterval each device context is probed, so
// one is noticed even while the daemon makes no driver call.
//
// The configuration comes from the host's --backend-opt keys (Options),
// falling back to the WCACHE_CUDA_* variables; the backend is built when
// the host's Configure arrives (plugin.WithSchema), and an invalid value
// is the answer to it.
func Main() int {
	return plugin.Serve(Name, func(logger hclog.Logger, opts sdk.Config) (sdk.Backend, error) {
		cfg, err := ConfigFromEnv(opts.Getenv)
		if err != nil {
			return nil, sdk.Errorf(sdk.ErrInvalidArgument, "invalid configuration: %v", err)
		}
		b, err := New(cfg, logger)
		if err != nil {
			// Debug, not Error: every call answers with err, and the host
			// prints it once (logging it too would print the same line twice).
			logger.Debug("CUDA backend unavailable", "error", err)
			return Unavailable(err), nil
		}
		// Runs until the process ends: a sticky error during serving or
		// Close exits with sdk.ExitFatal.
		go b.Runtime().ExitOnFatal(logger, nil, os.Exit)
		go b.Runtime().core.WatchHealth(cfg.HealthInterval, nil, b.Runtime().Fatal())
		return b, nil
	}, plugin.WithSchema(Options()), plugin.WithDoc("docs/cuda-backend.md"))
}
