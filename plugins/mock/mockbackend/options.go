package mockbackend

import (
	"strconv"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
)

// Options is the mock's configuration schema: one --backend-opt key per
// WCACHE_MOCK_* variable, which stays the fallback (see ConfigFromEnv for
// the syntax of each). An option given with --backend-opt wins over its
// variable, which wins over the default.
func Options() []sdk.Option {
	return []sdk.Option{
		{Name: "devices", Type: sdk.OptionString, Default: strconv.Itoa(DefaultDeviceCount), Env: EnvDevices,
			Description: "a device count, or a comma-separated list of device UUIDs (one device each)"},
		{Name: "memory", Type: sdk.OptionSize, Default: "8GiB", Env: EnvMemory,
			Description: "capacity of every device: bytes, or a size with a unit (512MiB, 1G)"},
		{Name: "dir", Type: sdk.OptionString, Env: EnvDir,
			Description: "folder of the allocation files (default /dev/shm/wcache-mock-UID, else under $TMPDIR)"},
		{Name: "handle", Type: sdk.OptionString, Default: names.KindMemfd, Env: EnvHandle,
			Description: "the handle kind Export produces: memfd (descriptors on the daemon's descriptor channel) or posix-shm (named files in dir)"},
		{Name: "fail-allocate", Type: sdk.OptionBool, Default: "false", Env: EnvFailAllocate,
			Description: "every Allocate fails with out of memory"},
		{Name: "fail-load-after", Type: sdk.OptionSize, Env: EnvFailLoadAfter,
			Description: "a Load fails once it has copied this many bytes (default: never)"},
		{Name: "crash-load-after", Type: sdk.OptionSize, Env: EnvCrashLoadAfter,
			Description: "the plugin exits with status 3 once a Load has copied this many bytes (default: never)"},
		{Name: "fail-peer-copy-after", Type: sdk.OptionSize, Env: EnvFailPeerCopyAfter,
			Description: "a PeerCopy fails once it has copied this many bytes (default: never)"},
		{Name: "fail-export", Type: sdk.OptionBool, Default: "false", Env: EnvFailExport,
			Description: "every Export fails"},
		{Name: "load-delay", Type: sdk.OptionDuration, Default: "0s", Env: EnvLoadDelay,
			Description: "every Load waits this long before copying"},
		{Name: "fault-devices", Type: sdk.OptionString, Env: EnvFaultDevices,
			Description: "ordinals or UUIDs, comma separated: the fault knobs apply only there (default: every device)"},
	}
}
