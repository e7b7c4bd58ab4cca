package rocmbackend

import (
	"strings"
	"testing"
	"time"
)

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{
		EnvLibrary: "/opt/rocm-6.3/lib/libamdhip64.so.6", EnvSysfsRoot: "/fixture",
		"WCACHE_ROCM_STAGING_BYTES": "1MiB", "WCACHE_ROCM_STAGING_BUFFERS": "3",
		"WCACHE_ROCM_READERS": "4", "WCACHE_ROCM_DIRECT_IO": "0", EnvHealthInterval: "0",
	}
	c, err := ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.Library != env[EnvLibrary] || c.SysfsRoot != "/fixture" || c.Staging.Bytes != 1<<20 || c.Staging.Buffers != 3 ||
		c.Staging.Readers != 4 || c.Staging.DirectIO || c.HealthInterval != 0 {
		t.Fatalf("config %+v", c)
	}
	d, err := ConfigFromEnv(func(string) string { return "" })
	if err != nil || d.Library != "" || d.Staging.Bytes != 16<<20 || !d.Staging.DirectIO || d.HealthInterval != 5*time.Second {
		t.Fatalf("defaults %+v %v", d, err)
	}
	for k, v := range map[string]string{"WCACHE_ROCM_STAGING_BYTES": "1000", "WCACHE_ROCM_STAGING_BUFFERS": "1",
		"WCACHE_ROCM_READERS": "x", EnvHealthInterval: "-1s"} {
		if _, err := ConfigFromEnv(func(n string) string {
			if n == k {
				return v
			}
			return ""
		}); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v, want an error naming the variable", k, v, err)
		}
	}
}
