package cudabackend

import (
	"fmt"
	"strings"
	"time"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/cuda/nvmlinfo"
	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/sdk/names"
)

// Environment variables read by ConfigFromEnv.
const (
	// EnvLibrary overrides the CUDA driver library path (default
	// libcuda.so.1, found by the dynamic loader).
	EnvLibrary = "WCACHE_CUDA_LIBRARY"
	// EnvNVMLLibrary overrides the NVML library path (default
	// libnvidia-ml.so.1). NVML that cannot be loaded is not an error.
	EnvNVMLLibrary = "WCACHE_NVML_LIBRARY"
	// EnvStagingBytes sets the size of each pinned staging buffer (default
	// 16 MiB): a multiple of 4096, as a byte count with an optional unit
	// (see sdk.ParseSize): 4096, 16MiB, 1GiB.
	EnvStagingBytes = "WCACHE_CUDA_STAGING_BYTES"
	// EnvStagingBuffers sets the number of staging buffers of each reader
	// (default 2).
	EnvStagingBuffers = "WCACHE_CUDA_STAGING_BUFFERS"
	// EnvReaders sets the number of fill readers per device, each with its
	// own OS thread, stream and staging buffers (default min(8, CPUs)).
	EnvReaders = "WCACHE_CUDA_READERS"
	// EnvDirectIO, "0" or "false", turns O_DIRECT reads off (default on:
	// O_DIRECT for files whose pages are not in the page cache).
	EnvDirectIO = "WCACHE_CUDA_DIRECT_IO"
	// EnvHealthInterval sets how often each device context is probed for
	// a sticky error (a Go duration; default DefaultHealthInterval, "0"
	// off).
	EnvHealthInterval = "WCACHE_CUDA_HEALTH_INTERVAL"
	// EnvHandle selects the handle kind Export produces: "cuda-ipc" (the
	// default) or "cuda-vmm-fd".
	EnvHandle = "WCACHE_CUDA_HANDLE"
)

// Handle kinds the backend can serve (Config.Handle).
const (
	// HandleIPC: legacy CUDA IPC, the 64-byte CUipcMemHandle of a
	// cuMemAlloc allocation. Importers must share the daemon's PID
	// namespace (hostPID in Kubernetes).
	HandleIPC = HandleKind
	// HandleVMMFD: a cuMemCreate allocation exported as a POSIX file
	// descriptor, passed over the daemon's descriptor channel. No shared
	// PID namespace is needed, and the daemon holds a descriptor of every
	// allocation (a plugin crash loses no weights).
	HandleVMMFD = names.KindCUDAVMMFD
)

// envNames are the staging variables (staging.Settings.Override).
var envNames = staging.EnvNames{Bytes: EnvStagingBytes, Buffers: EnvStagingBuffers, Readers: EnvReaders, DirectIO: EnvDirectIO}

// Config configures a Runtime. The zero value is not valid; start from
// DefaultConfig.
type Config struct {
	// Library is the CUDA driver to dlopen. Default driver.DefaultLibrary.
	Library string
	// NVMLLibrary is the NVML library to dlopen. Default
	// nvmlinfo.DefaultLibrary.
	NVMLLibrary string
	// Staging are the fill settings: staging buffers, readers, O_DIRECT
	// (see staging.Settings).
	Staging staging.Settings
	// HealthInterval is how often Main probes each device context for a
	// sticky error (see gpucore.Runtime.WatchHealth); 0 turns the probe off.
	HealthInterval time.Duration
	// Handle is the kind Export produces and Import accepts: HandleIPC
	// (the default, also for "") or HandleVMMFD.
	Handle string
	// SysfsRoot is where sysfs is read for the GPU's NUMA node ("":
	// /sys); tests point it elsewhere.
	SysfsRoot string
}

// DefaultConfig returns the defaults: the system libraries, 2 × 16 MiB
// staging per reader, the default reader count, O_DIRECT on.
func DefaultConfig() Config {
	return Config{
		Library:        driver.DefaultLibrary,
		NVMLLibrary:    nvmlinfo.DefaultLibrary,
		Staging:        staging.DefaultSettings(),
		HealthInterval: DefaultHealthInterval,
		Handle:         HandleIPC,
	}
}

// ConfigFromEnv returns DefaultConfig overridden by the WCACHE_CUDA_* and
// WCACHE_NVML_LIBRARY variables read through getenv. A malformed value is
// an error naming the variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := DefaultConfig()
	if v := strings.TrimSpace(getenv(EnvLibrary)); v != "" {
		c.Library = v
	}
	if v := strings.TrimSpace(getenv(EnvNVMLLibrary)); v != "" {
		c.NVMLLibrary = v
	}
	var err error
	if c.Staging, err = c.Staging.Override(getenv, envNames); err != nil {
		return c, err
	}
	if v := strings.TrimSpace(getenv(EnvHealthInterval)); v != "" {
		d, err := gpucore.ParseHealthInterval(EnvHealthInterval, v)
		if err != nil {
			return c, err
		}
		c.HealthInterval = d
	}
	if v := strings.TrimSpace(getenv(EnvHandle)); v != "" {
		c.Handle = v
	}
	return c, c.Validate()
}

// handleKind returns Handle, HandleIPC for "".
func (c Config) handleKind() string {
	if c.Handle == "" {
		return HandleIPC
	}
	return c.Handle
}

// Validate checks the staging settings and the handle kind.
func (c Config) Validate() error {
	if err := c.Staging.Validate(envNames); err != nil {
		return err
	}
	if k := c.handleKind(); k != HandleIPC && k != HandleVMMFD {
		return fmt.Errorf("handle kind %q: want %q or %q (%s)", c.Handle, HandleIPC, HandleVMMFD, EnvHandle)
	}
	return nil
}
