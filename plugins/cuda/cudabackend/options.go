package cudabackend

import (
	"strconv"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/cuda/nvmlinfo"
	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/sdk"
)

// Options is the CUDA backend's configuration schema: one --backend-opt
// key per variable ConfigFromEnv reads, which stays the fallback. An
// option given with --backend-opt wins over its variable, which wins over
// the default. The backend is built with the result (plugin.WithSchema),
// so every option, the driver library included, applies from the start.
func Options() []sdk.Option {
	return []sdk.Option{
		{Name: "library", Type: sdk.OptionString, Default: driver.DefaultLibrary, Env: EnvLibrary,
			Description: "the CUDA driver library to dlopen"},
		{Name: "nvml-library", Type: sdk.OptionString, Default: nvmlinfo.DefaultLibrary, Env: EnvNVMLLibrary,
			Description: "the NVML library to dlopen (one that cannot be loaded is not an error)"},
		{Name: "staging-bytes", Type: sdk.OptionSize, Default: "16MiB", Env: EnvStagingBytes,
			Description: "size of each pinned staging buffer: a multiple of 4096"},
		{Name: "staging-buffers", Type: sdk.OptionInt, Default: strconv.Itoa(staging.DefaultBuffers), Env: EnvStagingBuffers,
			Description: "staging buffers per reader, 2 to " + strconv.Itoa(staging.MaxBuffers)},
		{Name: "readers", Type: sdk.OptionInt, Default: "0", Env: EnvReaders,
			Description: "fill readers per device; 0: min(8, CPUs)"},
		{Name: "direct-io", Type: sdk.OptionBool, Default: "true", Env: EnvDirectIO,
			Description: "read files that are not in the page cache with O_DIRECT"},
		{Name: "health-interval", Type: sdk.OptionDuration, Default: DefaultHealthInterval.String(), Env: EnvHealthInterval,
			Description: "how often each device context is probed for a sticky error; 0: never"},
		{Name: "handle", Type: sdk.OptionString, Default: HandleIPC, Env: EnvHandle,
			Description: "the handle kind Export produces: cuda-ipc (legacy IPC; engines need the daemon's PID namespace) or cuda-vmm-fd (cuMemCreate memory as descriptors on the daemon's descriptor channel)"},
	}
}
