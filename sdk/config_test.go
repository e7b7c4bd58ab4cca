package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/internal/grpcpipe"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
)

var schema = []sdk.Option{
	{Name: "devices", Type: sdk.OptionInt, Default: "2", Env: "ACME_DEVICES", Description: "device count"},
	{Name: "memory", Type: sdk.OptionSize, Default: "1GiB", Env: "ACME_MEMORY", Description: "per device"},
	{Name: "fast", Type: sdk.OptionBool, Default: "false", Description: "go fast"},
	{Name: "delay", Type: sdk.OptionDuration, Env: "ACME_DELAY", Description: "wait"},
	{Name: "label", Type: sdk.OptionString, Description: "free text"},
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestResolveConfigPrecedence(t *testing.T) {
	cfg, err := sdk.ResolveConfig(schema, map[string]string{"devices": "4"},
		env(map[string]string{"ACME_DEVICES": "8", "ACME_MEMORY": "512MiB", "OTHER": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Int("devices") != 4 || cfg.Source("devices") != sdk.SourceOption {
		t.Errorf("devices = %d from %s, want 4 from the option", cfg.Int("devices"), cfg.Source("devices"))
	}
	if cfg.Size("memory") != 512<<20 || cfg.Source("memory") != sdk.SourceEnv {
		t.Errorf("memory = %d from %s, want 512MiB from the variable", cfg.Size("memory"), cfg.Source("memory"))
	}
	if cfg.Bool("fast") || cfg.Source("fast") != sdk.SourceDefault || cfg.Duration("delay") != 0 {
		t.Errorf("fast = %v (%s), delay = %v", cfg.Bool("fast"), cfg.Source("fast"), cfg.Duration("delay"))
	}
	// Getenv: the option's value for its variable, the environment otherwise.
	if cfg.Getenv("ACME_DEVICES") != "4" || cfg.Getenv("ACME_MEMORY") != "512MiB" || cfg.Getenv("OTHER") != "x" {
		t.Errorf("Getenv: %q %q %q", cfg.Getenv("ACME_DEVICES"), cfg.Getenv("ACME_MEMORY"), cfg.Getenv("OTHER"))
	}
	if g := cfg.Given(); len(g) != 1 || g["devices"] != "4" {
		t.Errorf("Given = %v", g)
	}
	cfg, err = sdk.ResolveConfig(schema, map[string]string{"delay": "1m30s"}, env(nil))
	if err != nil || cfg.Duration("delay") != 90*time.Second {
		t.Fatalf("delay: %v %v", cfg.Duration("delay"), err)
	}
}

func TestResolveConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		given map[string]string
		env   map[string]string
		want  []string
	}{
		{map[string]string{"speed": "1", "colour": "red"}, nil,
			[]string{`"colour", "speed"`, "known: devices, memory, fast, delay, label"}},
		{map[string]string{"devices": "many"}, nil, []string{"--backend-opt devices=", "int"}},
		{map[string]string{"memory": ""}, nil, []string{"--backend-opt memory=", "size"}},
		{nil, map[string]string{"ACME_DELAY": "soon"}, []string{`ACME_DELAY="soon"`, "duration"}},
	} {
		_, err := sdk.ResolveConfig(schema, tc.given, env(tc.env))
		if !errors.Is(err, sdk.ErrInvalidArgument) {
			t.Errorf("ResolveConfig(%v, %v) = %v, want ErrInvalidArgument", tc.given, tc.env, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q lacks %q", err, w)
			}
		}
	}
	_, err := sdk.ResolveConfig(nil, map[string]string{"x": "1"}, nil)
	if err == nil || !strings.Contains(err.Error(), "declares no options") {
		t.Errorf("a key for a backend without options: %v", err)
	}
}

func TestValidateSchemaRefusesBadSchemas(t *testing.T) {
	for _, bad := range [][]sdk.Option{
		{{Name: "Devices", Type: sdk.OptionInt}},
		{{Name: "a", Type: "float"}},
		{{Name: "a", Type: sdk.OptionInt, Default: "x"}},
		{{Name: "a", Type: sdk.OptionString}, {Name: "a", Type: sdk.OptionString}},
	} {
		if err := sdk.ValidateSchema(bad); err == nil {
			t.Errorf("ValidateSchema(%+v) accepted it", bad)
		}
	}
}

// Configure reaches a Configurable backend across the gRPC adapters, with
// the schema announced in Info and unknown keys refused by the sdk.
func TestConfigureAcrossTheAdapters(t *testing.T) {
	var got sdk.Config
	impl := &mock.Backend{
		InfoFunc: func(context.Context) (sdk.Info, error) {
			return sdk.Info{Name: "acme", HandleKinds: []string{"x-acme-buf"}}, nil
		},
		OptionsFunc:   func() []sdk.Option { return schema },
		ConfigureFunc: func(_ context.Context, cfg sdk.Config) error { got = cfg; return nil },
	}
	client, _ := grpcpipe.Connect(t, impl)
	ctx := t.Context()
	info, err := client.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Options) != len(schema) || info.Options[1] != schema[1] {
		t.Fatalf("Info.Options = %+v, want the schema", info.Options)
	}
	if err := sdk.Configure(ctx, client, map[string]string{"devices": "3", "label": "hi"}); err != nil {
		t.Fatal(err)
	}
	if got.Int("devices") != 3 || got.Value("label") != "hi" || got.Value("memory") != "1GiB" {
		t.Fatalf("the backend got devices=%d label=%q memory=%q", got.Int("devices"), got.Value("label"), got.Value("memory"))
	}
	err = sdk.Configure(ctx, client, map[string]string{"nope": "1"})
	if !errors.Is(err, sdk.ErrInvalidArgument) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unknown key across the adapters: %v", err)
	}
	// A backend without options: none accepted, the empty set is fine.
	plain, _ := grpcpipe.Connect(t, &mock.Backend{})
	if err := sdk.Configure(ctx, plain, nil); err != nil {
		t.Fatalf("empty configuration of a backend without options: %v", err)
	}
}
