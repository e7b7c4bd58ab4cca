package mockbackend

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	good := map[string]uint64{
		"0": 0, "4096": 4096, "8GiB": 8 << 30, "512MiB": 512 << 20, "1G": 1e9, "1g": 1e9,
		"2 KiB": 2048, "3Ki": 3072, "1.5GiB": 3 << 29, "10MB": 10e6, "7b": 7, "1TiB": 1 << 40,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "12XB", "-1", "1.2.3G", "99999999999999999999", "17000000TiB"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestDeviceUUIDIsDeterministicAndCanonical(t *testing.T) {
	canonical := regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for i := range 64 {
		u := DeviceUUID(i)
		if !canonical.MatchString(u) {
			t.Fatalf("DeviceUUID(%d) = %q, not canonical", i, u)
		}
		if seen[u] {
			t.Fatalf("DeviceUUID(%d) = %q repeats", i, u)
		}
		seen[u] = true
	}
	// Pinned (sha256 of "wcache-mock-0", computed independently): socket
	// paths of existing deployments depend on it.
	if got := DeviceUUID(0); got != "GPU-354ff92c-f96c-a7bd-1544-6779cac7a169" {
		t.Fatalf("DeviceUUID(0) = %q", got)
	}
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigFromEnv(t *testing.T) {
	cfg, err := ConfigFromEnv(nil)
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if len(cfg.DeviceUUIDs) != DefaultDeviceCount || cfg.Memory != DefaultMemory || cfg.Dir != "" ||
		cfg.Faults != NoFaults() {
		t.Fatalf("defaults = %+v", cfg)
	}

	cfg, err = ConfigFromEnv(env(map[string]string{
		EnvDevices: "3", EnvMemory: "512MiB", EnvDir: "/x/y",
		EnvFailAllocate: "1", EnvFailExport: "true", EnvFailLoadAfter: "1MiB", EnvCrashLoadAfter: "0",
		EnvLoadDelay: "250ms",
	}))
	if err != nil {
		t.Fatalf("ConfigFromEnv: %v", err)
	}
	want := Faults{FailAllocate: true, FailExport: true, FailLoadAfter: 1 << 20, CrashLoadAfter: 0, LoadDelay: 250 * time.Millisecond}
	if len(cfg.DeviceUUIDs) != 3 || cfg.DeviceUUIDs[2] != DeviceUUID(2) || cfg.Memory != 512<<20 || cfg.Dir != "/x/y" || cfg.Faults != want {
		t.Fatalf("cfg = %+v", cfg)
	}

	cfg, err = ConfigFromEnv(env(map[string]string{EnvDevices: "GPU-a, MIG-b-1"}))
	if err != nil || len(cfg.DeviceUUIDs) != 2 || cfg.DeviceUUIDs[0] != "GPU-a" || cfg.DeviceUUIDs[1] != "MIG-b-1" {
		t.Fatalf("UUID list: %+v, %v", cfg.DeviceUUIDs, err)
	}
}

func TestConfigFromEnvNamesTheBadVariable(t *testing.T) {
	cases := map[string]string{
		EnvDevices:        "GPU-a,../etc",
		EnvMemory:         "lots",
		EnvFailAllocate:   "maybe",
		EnvFailLoadAfter:  "-3",
		EnvCrashLoadAfter: "x",
		EnvLoadDelay:      "soon",
	}
	for name, value := range cases {
		_, err := ConfigFromEnv(env(map[string]string{name: value}))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: err = %v, want an error naming the variable", name, value, err)
		}
	}
	for _, v := range []string{"GPU-a,GPU-a", "2000", "-1", "0"} {
		_, err := ConfigFromEnv(env(map[string]string{EnvDevices: v, EnvMemory: "0"}))
		if err == nil {
			t.Errorf("%s=%q with %s=0 accepted", EnvDevices, v, EnvMemory)
		}
	}
}
