package rocmbackend

import (
	"strings"
	"time"

	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/plugins/internal/staging"
)

// Environment variables read by ConfigFromEnv.
const (
	// EnvLibrary overrides the HIP runtime path (default: the sonames in
	// hip.DefaultLibraries, then /opt/rocm/lib).
	EnvLibrary = "WCACHE_ROCM_LIBRARY"
	// EnvAMDSMILibrary overrides the amdsmi path (default libamd_smi.so,
	// then /opt/rocm/lib). amdsmi that cannot be loaded is not an error.
	EnvAMDSMILibrary = "WCACHE_AMDSMI_LIBRARY"
	// EnvSysfsRoot overrides where sysfs is read (KFD topology, NUMA
	// nodes); default /sys.
	EnvSysfsRoot = "WCACHE_ROCM_SYSFS_ROOT"
	// EnvHealthInterval sets how often each device is probed for a fatal
	// error (a Go duration; default DefaultHealthInterval, "0" off).
	EnvHealthInterval = "WCACHE_ROCM_HEALTH_INTERVAL"
	// EnvPrefix prefixes the staging variables: WCACHE_ROCM_STAGING_BYTES
	// (default 16 MiB), WCACHE_ROCM_STAGING_BUFFERS (2),
	// WCACHE_ROCM_READERS (min(8, CPUs)), WCACHE_ROCM_DIRECT_IO (1).
	EnvPrefix = "WCACHE_ROCM"
)

// DefaultHealthInterval is how often watchHealth probes each device that
// has a worker.
const DefaultHealthInterval = 5 * time.Second

// Config configures a Runtime. Start from DefaultConfig.
type Config struct {
	// Library is the HIP runtime to dlopen; "" tries hip.DefaultLibraries.
	Library string
	// AMDSMILibrary is the amdsmi library; "" tries amdsmi.DefaultLibraries.
	AMDSMILibrary string
	// Staging are the fill settings (see staging.Settings).
	Staging staging.Settings
	// HealthInterval is how often Main probes each device for a fatal
	// error; 0 turns the probe off.
	HealthInterval time.Duration
	// SysfsRoot is where sysfs is read ("": /sys); tests point it at
	// fixture trees.
	SysfsRoot string
}

// envNames are the staging variables.
var envNames = staging.EnvNamesWithPrefix(EnvPrefix)

// DefaultConfig returns the defaults: the system libraries, 2 × 16 MiB
// staging per reader, the default reader count, O_DIRECT on.
func DefaultConfig() Config {
	return Config{Staging: staging.DefaultSettings(), HealthInterval: DefaultHealthInterval}
}

// ConfigFromEnv returns DefaultConfig overridden by the WCACHE_ROCM_* and
// WCACHE_AMDSMI_LIBRARY variables read through getenv. A malformed value
// is an error naming the variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := DefaultConfig()
	c.Library = strings.TrimSpace(getenv(EnvLibrary))
	c.AMDSMILibrary = strings.TrimSpace(getenv(EnvAMDSMILibrary))
	c.SysfsRoot = strings.TrimSpace(getenv(EnvSysfsRoot))
	var err error
	if c.Staging, err = c.Staging.Override(getenv, envNames); err != nil {
		return c, err
	}
	if v := strings.TrimSpace(getenv(EnvHealthInterval)); v != "" {
		if c.HealthInterval, err = gpucore.ParseHealthInterval(EnvHealthInterval, v); err != nil {
			return c, err
		}
	}
	return c, c.Validate()
}

// Validate checks the staging settings.
func (c Config) Validate() error { return c.Staging.Validate(envNames) }
