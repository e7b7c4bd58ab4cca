package cudabackend

import (
	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/fatal"
)

// ExitOnFatal waits for rt's first sticky CUDA error (700 illegal address,
// 719 launch failure, 214 uncorrectable ECC, 999 unknown, …), logs it and
// calls exit(sdk.ExitFatal). After such an error every CUDA call of the
// process fails, so serving on would only turn each request into the same
// failure: the plugin exits instead, the daemon stops with the logged
// reason (the host reports a dead plugin's last log lines) and clients see
// the daemon gone. It returns without exiting when stop is closed first.
func (rt *Runtime) ExitOnFatal(logger hclog.Logger, stop <-chan struct{}, exit func(int)) {
	fatal.ExitOn(rt.Fatal(), rt.FatalError, logger,
		"CUDA reported a sticky error: the device context is unusable until this process exits; "+
			"exiting so that the daemon stops (restart it once the GPU is healthy; check dmesg for Xid errors)",
		stop, exit)
}
