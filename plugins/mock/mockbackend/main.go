package mockbackend

import (
	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/plugin"
)

// Main runs the mock backend as a wcache plugin through sdk/plugin.Serve and
// returns the process exit status: 0 after the host closed the plugin, 1
// when run by hand, when the configuration is invalid or the folder
// unusable (the reason is logged, so the host shows it).
//
// Cleanup: the allocation files are removed when the host closes the
// plugin, and on SIGTERM or SIGHUP. The host starts plugins with
// Pdeathsig=SIGKILL; Main replaces it with SIGTERM
// (plugin.WithCloseOnTermination), so that a host killed with SIGKILL
// still gets its files removed. Only a SIGKILL of the plugin itself (or an
// injected crash) leaves files behind, and the next mock started on the
// same folder removes them. Replacing the signal works only when Main runs
// on the main thread: call it from main with the main goroutine locked
// there by runtime.LockOSThread in an init function.
//
// The configuration comes from the host's --backend-opt keys (Options),
// falling back to the WCACHE_MOCK_* variables: the backend is built when
// the host's Configure arrives (plugin.WithSchema).
func Main() int {
	return plugin.Serve("mock", func(logger hclog.Logger, opts sdk.Config) (sdk.Backend, error) {
		cfg, err := ConfigFromEnv(opts.Getenv)
		if err != nil {
			return nil, sdk.Errorf(sdk.ErrInvalidArgument, "invalid configuration: %v", err)
		}
		return New(cfg, logger)
	}, plugin.WithSchema(Options()), plugin.WithDoc("docs/mock-backend.md"), plugin.WithCloseOnTermination())
}
