package mockbackend

import (
	"testing"

	"github.com/wcache/wcache/plugins/internal/testkit/optiontest"
	"github.com/wcache/wcache/sdk"
)

// The defaults the schema shows are the ones ConfigFromEnv applies: a
// drift between the two would make `wcache devices --describe` lie.
func TestOptionDefaultsMatchConfigFromEnv(t *testing.T) {
	optiontest.CheckDefaults(t, Options(), ConfigFromEnv)
}

// An option given by the host wins over its variable; the variable still
// applies to the options not given.
func TestOptionsWinOverTheirVariables(t *testing.T) {
	t.Setenv(EnvDevices, "5")
	t.Setenv(EnvMemory, "1GiB")
	cfg, err := sdk.ResolveConfig(Options(), map[string]string{"devices": "3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := ConfigFromEnv(cfg.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if len(mc.DeviceUUIDs) != 3 || mc.Memory != 1<<30 {
		t.Fatalf("devices %d, memory %d; want 3 (the option) and 1 GiB (the variable)", len(mc.DeviceUUIDs), mc.Memory)
	}
	if cfg.Source("devices") != sdk.SourceOption || cfg.Source("memory") != sdk.SourceEnv || cfg.Source("dir") != sdk.SourceDefault {
		t.Fatalf("sources %s %s %s", cfg.Source("devices"), cfg.Source("memory"), cfg.Source("dir"))
	}
}
