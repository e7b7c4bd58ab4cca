package mockbackend

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

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
		!reflect.DeepEqual(cfg.Faults, NoFaults()) {
		t.Fatalf("defaults = %+v", cfg)
	}

	cfg, err = ConfigFromEnv(env(map[string]string{
		EnvDevices: "3", EnvMemory: "512MiB", EnvDir: "/x/y",
		EnvFailAllocate: "1", EnvFailExport: "true", EnvFailLoadAfter: "1MiB", EnvCrashLoadAfter: "0",
		EnvLoadDelay: "250ms", EnvFailPeerCopyAfter: "2MiB",
	}))
	if err != nil {
		t.Fatalf("ConfigFromEnv: %v", err)
	}
	want := Faults{FailAllocate: true, FailExport: true, FailLoadAfter: 1 << 20, CrashLoadAfter: 0, LoadDelay: 250 * time.Millisecond,
		FailPeerCopyAfter: 2 << 20}
	if len(cfg.DeviceUUIDs) != 3 || cfg.DeviceUUIDs[2] != DeviceUUID(2) || cfg.Memory != 512<<20 || cfg.Dir != "/x/y" || !reflect.DeepEqual(cfg.Faults, want) {
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

func TestConfigFromEnvFaultDevices(t *testing.T) {
	devices := "GPU-a,GPU-b,GPU-c"
	for value, want := range map[string][]int{
		"1":              {1},
		" GPU-c , 0 ":    {2, 0},
		"GPU-b":          {1},
		"0,1,2":          {0, 1, 2},
		"   ":            nil, // blank is unset: every device
		"GPU-a,2,GPU-b ": {0, 2, 1},
	} {
		cfg, err := ConfigFromEnv(env(map[string]string{EnvDevices: devices, EnvFaultDevices: value, EnvFailLoadAfter: "0"}))
		if err != nil {
			t.Errorf("%s=%q: %v", EnvFaultDevices, value, err)
			continue
		}
		if !reflect.DeepEqual(cfg.Faults.Devices, want) || cfg.Faults.FailLoadAfter != 0 {
			t.Errorf("%s=%q: faults %+v, want devices %v", EnvFaultDevices, value, cfg.Faults, want)
		}
	}
	// With a device count, ordinals and the derived UUIDs both work.
	cfg, err := ConfigFromEnv(env(map[string]string{EnvDevices: "4", EnvFaultDevices: DeviceUUID(3) + ",1"}))
	if err != nil || !reflect.DeepEqual(cfg.Faults.Devices, []int{3, 1}) {
		t.Fatalf("count devices: %+v, %v", cfg.Faults, err)
	}
	if !cfg.Faults.AppliesTo(3) || !cfg.Faults.AppliesTo(1) || cfg.Faults.AppliesTo(0) || cfg.Faults.AppliesTo(2) {
		t.Errorf("AppliesTo disagrees with devices %v", cfg.Faults.Devices)
	}
	if all := NoFaults(); !all.AppliesTo(0) || !all.AppliesTo(7) {
		t.Error("faults without devices must apply to every device")
	}
}

func TestConfigFromEnvRefusesUnknownFaultDevices(t *testing.T) {
	for value, want := range map[string]string{
		"3":           "no device with ordinal 3",
		"-1":          "no device with ordinal -1",
		"GPU-z":       `no device with UUID "GPU-z"`,
		"../etc":      `no device with UUID "../etc"`,
		"1,1":         "listed twice",
		"GPU-a,0":     "listed twice",
		"0,,1":        "empty entry",
		"1,":          "empty entry",
		"GPU-a;GPU-b": `no device with UUID "GPU-a;GPU-b"`,
	} {
		_, err := ConfigFromEnv(env(map[string]string{EnvDevices: "GPU-a,GPU-b,GPU-c", EnvFaultDevices: value}))
		if err == nil || !strings.Contains(err.Error(), EnvFaultDevices) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=%q: err = %v, want an error naming the variable and saying %q", EnvFaultDevices, value, err, want)
		}
	}
	// Another bad knob does not hide a bad device list.
	_, err := ConfigFromEnv(env(map[string]string{EnvFailAllocate: "maybe", EnvFaultDevices: "9"}))
	if err == nil || !strings.Contains(err.Error(), EnvFailAllocate) || !strings.Contains(err.Error(), EnvFaultDevices) {
		t.Errorf("two bad variables: err = %v, want both named", err)
	}
	// A bad device list is reported once, by itself, not again through
	// the fault device list that depends on it.
	_, err = ConfigFromEnv(env(map[string]string{EnvDevices: "GPU-a,GPU-a", EnvFaultDevices: "GPU-a"}))
	if err == nil || !strings.Contains(err.Error(), EnvDevices) || strings.Contains(err.Error(), EnvFaultDevices) {
		t.Errorf("bad device list: err = %v, want only %s named", err, EnvDevices)
	}
}
