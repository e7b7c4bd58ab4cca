// Package mockbackend is the "mock" wcache device backend: devices backed
// by shared-memory files, handles of kind "posix-shm", and fault injection
// for reliability tests. The binary wcache-backend-mock (plugins/mock) is
// a thin main around Main; tests use New in-process.
//
// See docs/mock-backend.md for the user-facing description.
package mockbackend

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
)

// Environment variables read by ConfigFromEnv.
const (
	// EnvDevices: a device count ("4") or a comma-separated list of UUIDs
	// ("GPU-aaaa…,GPU-bbbb…"), one device per entry. Default 2.
	EnvDevices = "WCACHE_MOCK_DEVICES"
	// EnvMemory: capacity of every device, bytes or a size with a unit
	// (8GiB, 512MiB, 1G). Default 8GiB.
	EnvMemory = "WCACHE_MOCK_MEMORY"
	// EnvDir: the folder holding the allocation files of posix-shm
	// handles. Default DefaultDir(). Unused (never created) with memfd.
	EnvDir = "WCACHE_MOCK_DIR"
	// EnvHandle: the handle kind the mock exports, "memfd" (the default:
	// anonymous memfds passed as descriptors, nothing named in /dev/shm)
	// or "posix-shm" (files in the folder, passed by path).
	EnvHandle = "WCACHE_MOCK_HANDLE"

	// EnvFailAllocate=1: every Allocate fails with ErrOutOfMemory.
	EnvFailAllocate = "WCACHE_MOCK_FAIL_ALLOCATE"
	// EnvFailLoadAfter=N: a Load fails (untyped I/O error) once it has
	// copied N bytes; 0 fails before the first byte.
	EnvFailLoadAfter = "WCACHE_MOCK_FAIL_LOAD_AFTER"
	// EnvCrashLoadAfter=N: the plugin process exits with status 3 once a
	// Load has copied N bytes, leaving its files behind like a real crash.
	EnvCrashLoadAfter = "WCACHE_MOCK_CRASH_LOAD_AFTER"
	// EnvFailPeerCopyAfter=N: a PeerCopy fails (untyped error) once it has
	// copied N bytes; 0 fails before the first byte. The new allocation is
	// freed either way.
	EnvFailPeerCopyAfter = "WCACHE_MOCK_FAIL_PEER_COPY_AFTER"
	// EnvFailExport=1: every Export fails (untyped error).
	EnvFailExport = "WCACHE_MOCK_FAIL_EXPORT"
	// EnvLoadDelay=<duration>: every Load waits this long (time.ParseDuration
	// syntax, e.g. 30s) before copying; the wait ends early when the call is
	// cancelled.
	EnvLoadDelay = "WCACHE_MOCK_LOAD_DELAY"
	// EnvFaultDevices: a comma-separated list of devices, each an ordinal
	// ("1") or a UUID of WCACHE_MOCK_DEVICES; the fault knobs above then
	// apply only to allocations on those devices. An entry that is a
	// decimal number is an ordinal. Unset: the knobs apply to every device.
	EnvFaultDevices = "WCACHE_MOCK_FAULT_DEVICES"
)

// Defaults.
const (
	DefaultDeviceCount = 2
	DefaultMemory      = 8 << 30
	// MaxDevices bounds WCACHE_MOCK_DEVICES.
	MaxDevices = 1024
	// CrashExitCode is the exit status of an injected crash.
	CrashExitCode = 3
)

// Config configures a mock backend.
type Config struct {
	// DeviceUUIDs has one entry per device, by ordinal.
	DeviceUUIDs []string
	// Memory is the capacity of each device in bytes.
	Memory uint64
	// Dir holds the allocation files of posix-shm handles; "" means
	// DefaultDir(). Not used with memfd handles.
	Dir string
	// Handle is the kind Export produces: names.KindMemfd (the default, also
	// for "") or names.KindPosixShm.
	Handle string
	Faults Faults
}

// Faults are the injected failures. The zero value injects none.
type Faults struct {
	FailAllocate bool
	// FailLoadAfter and CrashLoadAfter are byte counts; negative is off.
	FailLoadAfter  int64
	CrashLoadAfter int64
	// FailPeerCopyAfter is a byte count; negative is off.
	FailPeerCopyAfter int64
	FailExport        bool
	LoadDelay         time.Duration
	// Devices are the ordinals whose allocations the knobs above apply
	// to: Allocate on such a device, Load and Export of an allocation made
	// on one. Empty (the default): every device. New refuses an ordinal
	// the backend does not have.
	Devices []int
}

// AppliesTo reports whether the knobs apply to allocations on device
// ordinal.
func (f Faults) AppliesTo(ordinal int) bool {
	return len(f.Devices) == 0 || slices.Contains(f.Devices, ordinal)
}

// NoFaults returns Faults with every knob off.
func NoFaults() Faults { return Faults{FailLoadAfter: -1, CrashLoadAfter: -1, FailPeerCopyAfter: -1} }

// DefaultConfig is DefaultDeviceCount devices of DefaultMemory bytes, the
// default folder and no faults.
func DefaultConfig() Config {
	return Config{DeviceUUIDs: DeviceUUIDs(DefaultDeviceCount), Memory: DefaultMemory, Handle: names.KindMemfd, Faults: NoFaults()}
}

// DeviceUUID is the UUID of mock device ordinal when WCACHE_MOCK_DEVICES
// is a count: "GPU-" and the first 16 bytes of sha256("wcache-mock-<ordinal>")
// in the 8-4-4-4-12 form NVIDIA uses. It is the same on every machine and
// in every process, which keeps socket paths stable across restarts.
func DeviceUUID(ordinal int) string {
	sum := sha256.Sum256([]byte("wcache-mock-" + strconv.Itoa(ordinal)))
	h := hex.EncodeToString(sum[:16])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// DeviceUUIDs returns DeviceUUID(0..n-1).
func DeviceUUIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = DeviceUUID(i)
	}
	return out
}

// ConfigFromEnv reads the WCACHE_MOCK_* variables through getenv (nil →
// none set). Unset variables keep DefaultConfig's values; a malformed one
// is an error naming the variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	cfg := DefaultConfig()
	var errs []error
	devicesOK := true
	if v := strings.TrimSpace(getenv(EnvDevices)); v != "" {
		uuids, err := parseDevices(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", EnvDevices, v, err))
			devicesOK = false
		}
		cfg.DeviceUUIDs = uuids
	}
	if v := strings.TrimSpace(getenv(EnvMemory)); v != "" {
		n, err := sdk.ParseSize(v)
		if err == nil && n == 0 {
			err = errors.New("must be more than 0 bytes")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", EnvMemory, v, err))
		}
		cfg.Memory = n
	}
	cfg.Dir = getenv(EnvDir)
	if v := strings.TrimSpace(getenv(EnvHandle)); v != "" {
		if v != names.KindMemfd && v != names.KindPosixShm {
			errs = append(errs, fmt.Errorf("%s=%q: want %q or %q", EnvHandle, v, names.KindMemfd, names.KindPosixShm))
		}
		cfg.Handle = v
	}
	var err error
	if cfg.Faults.FailAllocate, err = parseFlag(getenv, EnvFailAllocate); err != nil {
		errs = append(errs, err)
	}
	if cfg.Faults.FailExport, err = parseFlag(getenv, EnvFailExport); err != nil {
		errs = append(errs, err)
	}
	if cfg.Faults.FailLoadAfter, err = parseByteKnob(getenv, EnvFailLoadAfter); err != nil {
		errs = append(errs, err)
	}
	if cfg.Faults.CrashLoadAfter, err = parseByteKnob(getenv, EnvCrashLoadAfter); err != nil {
		errs = append(errs, err)
	}
	if cfg.Faults.FailPeerCopyAfter, err = parseByteKnob(getenv, EnvFailPeerCopyAfter); err != nil {
		errs = append(errs, err)
	}
	if v := strings.TrimSpace(getenv(EnvLoadDelay)); v != "" {
		d, err := time.ParseDuration(v)
		if err == nil && d < 0 {
			err = errors.New("must not be negative")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", EnvLoadDelay, v, err))
		}
		cfg.Faults.LoadDelay = d
	}
	// Checked against the device list, so only once that list is valid:
	// a broken WCACHE_MOCK_DEVICES is already reported.
	if v := strings.TrimSpace(getenv(EnvFaultDevices)); v != "" && devicesOK {
		devs, err := parseFaultDevices(v, cfg.DeviceUUIDs)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", EnvFaultDevices, v, err))
		}
		cfg.Faults.Devices = devs
	}
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("mock backend configuration: %w", errors.Join(errs...))
	}
	return cfg, nil
}

// parseDevices accepts a count or a comma-separated list of UUIDs.
func parseDevices(v string) ([]string, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 || n > MaxDevices {
			return nil, fmt.Errorf("device count must be between 0 and %d", MaxDevices)
		}
		return DeviceUUIDs(n), nil
	}
	var out []string
	seen := map[string]bool{}
	for _, u := range strings.Split(v, ",") {
		u = strings.TrimSpace(u)
		if err := validateUUID(u); err != nil {
			return nil, err
		}
		if seen[u] {
			return nil, fmt.Errorf("device UUID %q listed twice", u)
		}
		seen[u] = true
		out = append(out, u)
	}
	if len(out) > MaxDevices {
		return nil, fmt.Errorf("more than %d devices", MaxDevices)
	}
	return out, nil
}

// parseFaultDevices resolves a comma-separated list of ordinals and UUIDs
// of uuids (the configured devices, by ordinal) to ordinals. An unknown
// ordinal or UUID, an empty entry or a device listed twice is an error.
func parseFaultDevices(v string, uuids []string) ([]int, error) {
	var out []int
	for _, entry := range strings.Split(v, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, errors.New("empty entry (want ordinals or device UUIDs, comma separated)")
		}
		ordinal, err := strconv.Atoi(entry)
		switch {
		case err == nil && (ordinal < 0 || ordinal >= len(uuids)):
			return nil, fmt.Errorf("no device with ordinal %d (the mock has %d devices, see %s)", ordinal, len(uuids), EnvDevices)
		case err != nil:
			if ordinal = slices.Index(uuids, entry); ordinal < 0 {
				return nil, fmt.Errorf("no device with UUID %q (the mock has %d devices, see %s)", entry, len(uuids), EnvDevices)
			}
		}
		if slices.Contains(out, ordinal) {
			return nil, fmt.Errorf("device %d (%s) listed twice", ordinal, uuids[ordinal])
		}
		out = append(out, ordinal)
	}
	return out, nil
}

// validateUUID applies the core's rule for anything that may end up in a
// path (sdk/names, the rule's single source): letters, digits and '-', 1
// to 128 characters.
func validateUUID(u string) error { return names.ValidateDeviceUUID(u) }

func parseFlag(getenv func(string) string, name string) (bool, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want 1 or 0", name, v)
	}
	return b, nil
}

func parseByteKnob(getenv func(string) string, name string) (int64, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return -1, nil
	}
	n, err := sdk.ParseSize(v)
	if err != nil || n > 1<<62 {
		return -1, fmt.Errorf("%s=%q: want a byte count", name, v)
	}
	return int64(n), nil
}
