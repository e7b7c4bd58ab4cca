package mockbackend

import (
	"fmt"
	"os"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
)

// Main runs the mock backend as a wcache plugin through sdk.MainWith and
// returns the process exit status: 0 after the host closed the plugin, 1
// when run by hand, when the configuration is invalid or the folder
// unusable (the reason is logged, so the host shows it).
//
// Cleanup: the allocation files are removed when the host closes the
// plugin, and on SIGTERM or SIGHUP. The host starts plugins with
// Pdeathsig=SIGKILL; Main replaces it with SIGTERM
// (sdk.MainOptions.CloseOnTermination), so that a host killed with SIGKILL
// still gets its files removed. Only a SIGKILL of the plugin itself (or an
// injected crash) leaves files behind, and the next mock started on the
// same folder removes them. Replacing the signal works only when Main runs
// on the main thread: call it from main with the main goroutine locked
// there by runtime.LockOSThread in an init function.
func Main() int {
	return sdk.MainWith("mock", func(logger hclog.Logger) (sdk.Backend, error) {
		cfg, err := ConfigFromEnv(os.Getenv)
		if err != nil {
			return nil, fmt.Errorf("invalid configuration: %w", err)
		}
		return New(cfg, logger)
	}, sdk.MainOptions{Doc: "docs/mock-backend.md", CloseOnTermination: true})
}
