package rocmbackend

import (
	"fmt"
	"os"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/fatal"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/plugin"
)

// Main runs the ROCm backend as a wcache plugin through sdk/plugin.Serve and
// returns the process exit status: 0 after the host closed the plugin, 1
// when run by hand or when the configuration (WCACHE_ROCM_*) is invalid.
//
// When HIP cannot be used (library or symbol missing, hipInit failing, no
// visible device) the plugin still serves, and every call but Info
// answers with that reason wrapped in sdk.ErrUnavailable, so that
// `wcache devices --backend rocm` prints it. A fatal HIP error (see
// hip.Code.Fatal) ends the process with sdk.ExitFatal after logging it;
// every cfg.HealthInterval each device worker is probed, so one is noticed
// even while the daemon makes no HIP call.
func Main() int {
	return plugin.Serve(Name, func(logger hclog.Logger, opts sdk.Config) (sdk.Backend, error) {
		cfg, err := ConfigFromEnv(opts.Getenv)
		if err != nil {
			return nil, fmt.Errorf("invalid configuration: %w", err)
		}
		b, err := New(cfg, logger)
		if err != nil {
			// Debug, not Error: every call answers with err, and the host
			// prints it once (as the CUDA backend does).
			logger.Debug("ROCm backend unavailable", "error", err)
			return Unavailable(err), nil
		}
		rt := b.Runtime()
		go rt.ExitOnFatal(logger, nil, os.Exit)
		go rt.core.WatchHealth(cfg.HealthInterval, nil, rt.Fatal())
		return b, nil
	}, plugin.WithDoc("docs/rocm-backend.md"))
}

// ExitOnFatal waits for rt's first fatal HIP error, logs it and calls
// exit(sdk.ExitFatal), so that the daemon stops with the reason instead
// of failing every later request the same way. It returns without exiting
// when stop is closed first.
func (rt *Runtime) ExitOnFatal(logger hclog.Logger, stop <-chan struct{}, exit func(int)) {
	fatal.ExitOn(rt.Fatal(), rt.FatalError, logger,
		"HIP reported a fatal error: the GPU is unusable until this process exits; exiting so that the daemon stops "+
			"(restart it once the GPU is healthy; check dmesg for amdgpu errors)", stop, exit)
}
