package mockbackend

import (
	"reflect"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// The defaults the schema shows are the ones ConfigFromEnv applies: a
// drift between the two would make `wcache devices --describe` lie.
func TestOptionDefaultsMatchConfigFromEnv(t *testing.T) {
	if err := sdk.ValidateSchema(Options()); err != nil {
		t.Fatal(err)
	}
	byEnv := map[string]string{}
	for _, o := range Options() {
		if o.Env == "" {
			t.Errorf("option %s has no variable to fall back on", o.Name)
		}
		byEnv[o.Env] = o.Default
	}
	fromDefaults, err := ConfigFromEnv(func(name string) string { return byEnv[name] })
	if err != nil {
		t.Fatalf("ConfigFromEnv(the schema's defaults): %v", err)
	}
	plain, err := ConfigFromEnv(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromDefaults, plain) {
		t.Fatalf("the schema's defaults give %+v, no variables give %+v", fromDefaults, plain)
	}
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
