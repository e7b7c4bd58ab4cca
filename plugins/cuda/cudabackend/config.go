package cudabackend

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/cuda/nvmlinfo"
	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/fill"
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
	HandleVMMFD = sdk.HandleCUDAVMMFD
)

// Limits on the staging configuration.
const (
	DefaultStagingBytes   = 16 << 20
	MinStagingBytes       = fill.Alignment
	MaxStagingBytes       = 4 << 30
	DefaultStagingBuffers = 2
	MaxStagingBuffers     = 8
	MaxReaders            = 64
)

// Config configures a Runtime. The zero value is not valid; start from
// DefaultConfig.
type Config struct {
	// Library is the CUDA driver to dlopen. Default driver.DefaultLibrary.
	Library string
	// NVMLLibrary is the NVML library to dlopen. Default
	// nvmlinfo.DefaultLibrary.
	NVMLLibrary string
	// StagingBytes is the size of each pinned staging buffer: a multiple
	// of 4096 in [MinStagingBytes, MaxStagingBytes].
	StagingBytes int
	// StagingBuffers is how many staging buffers rotate in each reader's
	// ring, in [2, MaxStagingBuffers]: while the GPU copies one, the next
	// is read into.
	StagingBuffers int
	// Readers is the number of fill readers per device, in [0,
	// MaxReaders]; 0 selects sdk/fill's default, min(8, CPUs). Pinned
	// staging memory per device is Readers × StagingBuffers ×
	// StagingBytes (256 MiB with 8 readers and the defaults).
	Readers int
	// DirectIO reads checkpoint files with O_DIRECT where the filesystem
	// allows it and their pages are not in the page cache.
	DirectIO bool
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
		StagingBytes:   DefaultStagingBytes,
		StagingBuffers: DefaultStagingBuffers,
		DirectIO:       true,
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
	if v := strings.TrimSpace(getenv(EnvStagingBytes)); v != "" {
		n, err := sdk.ParseSize(v)
		if err != nil || n > MaxStagingBytes {
			return c, fmt.Errorf("%s=%q: want a byte count up to %d", EnvStagingBytes, v, MaxStagingBytes)
		}
		c.StagingBytes = int(n)
	}
	if v := strings.TrimSpace(getenv(EnvStagingBuffers)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return c, fmt.Errorf("%s=%q: want an integer", EnvStagingBuffers, v)
		}
		c.StagingBuffers = n
	}
	if v := strings.TrimSpace(getenv(EnvReaders)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return c, fmt.Errorf("%s=%q: want an integer", EnvReaders, v)
		}
		c.Readers = n
	}
	if v := strings.TrimSpace(getenv(EnvDirectIO)); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("%s=%q: want 1 or 0", EnvDirectIO, v)
		}
		c.DirectIO = on
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
	if c.StagingBytes < MinStagingBytes || c.StagingBytes > MaxStagingBytes || c.StagingBytes%fill.Alignment != 0 {
		return fmt.Errorf("staging buffer size %d: want a multiple of %d between %d and %d bytes (%s)",
			c.StagingBytes, fill.Alignment, MinStagingBytes, MaxStagingBytes, EnvStagingBytes)
	}
	if c.StagingBuffers < 2 || c.StagingBuffers > MaxStagingBuffers {
		return fmt.Errorf("staging buffer count %d: want 2 to %d (%s)", c.StagingBuffers, MaxStagingBuffers, EnvStagingBuffers)
	}
	if k := c.handleKind(); k != HandleIPC && k != HandleVMMFD {
		return fmt.Errorf("handle kind %q: want %q or %q (%s)", c.Handle, HandleIPC, HandleVMMFD, EnvHandle)
	}
	if c.Readers < 0 || c.Readers > MaxReaders {
		return fmt.Errorf("reader count %d: want 0 (default) to %d (%s)", c.Readers, MaxReaders, EnvReaders)
	}
	return nil
}
