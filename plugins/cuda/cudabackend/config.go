package cudabackend

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/cuda/nvmlinfo"
	"github.com/wcache/wcache/plugins/cuda/staging"

	"github.com/wcache/wcache/sdk"
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
	// 64 MiB): a multiple of 4096, as a byte count with an optional unit
	// (see sdk.ParseSize): 4096, 16MiB, 1GiB.
	EnvStagingBytes = "WCACHE_CUDA_STAGING_BYTES"
	// EnvStagingBuffers sets the number of staging buffers (default 2).
	EnvStagingBuffers = "WCACHE_CUDA_STAGING_BUFFERS"
	// EnvDirectIO, "0" or "false", turns O_DIRECT reads off (default on).
	EnvDirectIO = "WCACHE_CUDA_DIRECT_IO"
)

// Limits on the staging configuration.
const (
	DefaultStagingBytes   = 64 << 20
	MinStagingBytes       = staging.Alignment
	MaxStagingBytes       = 4 << 30
	DefaultStagingBuffers = 2
	MaxStagingBuffers     = 8
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
	// StagingBuffers is how many staging buffers rotate, in [2,
	// MaxStagingBuffers]: while the GPU copies one, the next is read into.
	StagingBuffers int
	// DirectIO reads checkpoint files with O_DIRECT where the filesystem
	// allows it.
	DirectIO bool
}

// DefaultConfig returns the defaults: the system libraries, 2 × 64 MiB
// staging, O_DIRECT on.
func DefaultConfig() Config {
	return Config{
		Library:        driver.DefaultLibrary,
		NVMLLibrary:    nvmlinfo.DefaultLibrary,
		StagingBytes:   DefaultStagingBytes,
		StagingBuffers: DefaultStagingBuffers,
		DirectIO:       true,
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
	if v := strings.TrimSpace(getenv(EnvDirectIO)); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("%s=%q: want 1 or 0", EnvDirectIO, v)
		}
		c.DirectIO = on
	}
	return c, c.Validate()
}

// Validate checks the staging settings.
func (c Config) Validate() error {
	if c.StagingBytes < MinStagingBytes || c.StagingBytes > MaxStagingBytes || c.StagingBytes%staging.Alignment != 0 {
		return fmt.Errorf("staging buffer size %d: want a multiple of %d between %d and %d bytes (%s)",
			c.StagingBytes, staging.Alignment, MinStagingBytes, MaxStagingBytes, EnvStagingBytes)
	}
	if c.StagingBuffers < 2 || c.StagingBuffers > MaxStagingBuffers {
		return fmt.Errorf("staging buffer count %d: want 2 to %d (%s)", c.StagingBuffers, MaxStagingBuffers, EnvStagingBuffers)
	}
	return nil
}
