package cudabackend

import (
	"fmt"
	"os"

	"github.com/wcache/wcache/sdk"
)

// Main runs the CUDA backend as a wcache plugin and returns the process
// exit status: 0 after the host closed the plugin, 1 when run by hand or
// when the configuration (WCACHE_CUDA_*) is invalid.
//
// When the driver cannot be used (library or symbol missing, cuInit
// failing, no visible device) the plugin still serves, and every call but
// Info answers with that reason wrapped in sdk.ErrUnavailable, so that
// `wcache devices --backend cuda` prints it. Device memory, staging
// buffers and contexts are released after the host closes the plugin; a
// killed plugin's device memory is reclaimed by the driver when the
// process ends, so no cleanup is left to anyone else. A sticky CUDA error
// (see driver.Result.Sticky) ends the process with ExitStatusSticky after
// logging it.
func Main() int {
	if !sdk.StartedByHost(os.Getenv) {
		fmt.Fprintln(os.Stderr, sdk.PluginHint("wcache-backend-cuda", "docs/cuda-backend.md"))
		return 1
	}
	logger := sdk.NewLogger("cuda")
	cfg, err := ConfigFromEnv(os.Getenv)
	if err != nil {
		logger.Error("invalid configuration", "error", err)
		return 1
	}
	b, err := New(cfg, logger)
	if err != nil {
		logger.Error("CUDA backend unavailable", "error", err)
		sdk.ServeWith(Unavailable(err), sdk.ServeOptions{Logger: logger})
		return 0
	}
	served := make(chan struct{})
	go exitOnFatal(b.Runtime(), logger, served, os.Exit)
	sdk.ServeWith(b, sdk.ServeOptions{Logger: logger})
	close(served)
	if err := b.Close(); err != nil {
		logger.Error("release device memory", "error", err)
		return 1
	}
	return 0
}
