package cudabackend

import (
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/plugins/internal/staging"
)

func TestConfigFromEnv(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	c, err := ConfigFromEnv(env(nil))
	if err != nil || c != DefaultConfig() {
		t.Fatalf("ConfigFromEnv(empty) = %+v, %v; want the defaults", c, err)
	}
	if c.HealthInterval != DefaultHealthInterval {
		t.Fatalf("default health interval = %v", c.HealthInterval)
	}
	if c, err := ConfigFromEnv(env(map[string]string{EnvHealthInterval: "0"})); err != nil || c.HealthInterval != 0 {
		t.Fatalf("%s=0: %+v, %v; want the probe off", EnvHealthInterval, c, err)
	}
	if c.Staging != staging.DefaultSettings() || c.Library != "libcuda.so.1" || c.NVMLLibrary != "libnvidia-ml.so.1" {
		t.Fatalf("defaults = %+v", c)
	}
	if c.Handle != HandleIPC {
		t.Fatalf("default handle kind %q, want %q", c.Handle, HandleIPC)
	}
	c, err = ConfigFromEnv(env(map[string]string{
		EnvLibrary: "/opt/fake/libcuda.so.1", EnvNVMLLibrary: "/opt/fake/libnvidia-ml.so.1",
		EnvStagingBytes: "16MiB", EnvStagingBuffers: "3", EnvReaders: "5", EnvDirectIO: "0",
		EnvHealthInterval: "250ms", EnvHandle: "cuda-vmm-fd",
	}))
	want := Config{Library: "/opt/fake/libcuda.so.1", NVMLLibrary: "/opt/fake/libnvidia-ml.so.1",
		Staging:        staging.Settings{Bytes: 16 << 20, Buffers: 3, Readers: 5},
		HealthInterval: 250 * time.Millisecond, Handle: HandleVMMFD}
	if err != nil || c != want {
		t.Fatalf("ConfigFromEnv = %+v, %v; want %+v", c, err, want)
	}
	for _, kv := range [][2]string{
		{EnvStagingBytes, "1000"},
		{EnvStagingBytes, "5GiB"},
		{EnvStagingBytes, "12 parsecs"},
		{EnvStagingBytes, "1M"}, // 1e6 is not a multiple of 4096
		{EnvStagingBuffers, "1"},
		{EnvStagingBuffers, "many"},
		{EnvDirectIO, "sometimes"},
		{EnvReaders, "-1"},
		{EnvReaders, "65"},
		{EnvReaders, "few"},
		{EnvHealthInterval, "often"},
		{EnvHealthInterval, "-1s"},
		{EnvHandle, "posix-shm"},
	} {
		if _, err := ConfigFromEnv(env(map[string]string{kv[0]: kv[1]})); err == nil || !strings.Contains(err.Error(), kv[0]) {
			t.Errorf("%s=%q: err = %v, want an error naming the variable", kv[0], kv[1], err)
		}
	}
}
