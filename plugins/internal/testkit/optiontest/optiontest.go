// Package optiontest checks a backend plugin's option schema (its
// Options, shown by `wcache devices --describe` and resolved by the host)
// against the configuration reader it documents (its ConfigFromEnv), so
// that the two cannot drift. It is for tests only (it imports testing).
package optiontest

import (
	"reflect"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// CheckDefaults checks that options is a valid schema (sdk.ValidateSchema)
// whose every option falls back on a variable, and that configFromEnv gives
// the same configuration from the schema's defaults as from no variables
// at all.
func CheckDefaults[C any](t *testing.T, options []sdk.Option, configFromEnv func(getenv func(string) string) (C, error)) {
	t.Helper()
	if err := sdk.ValidateSchema(options); err != nil {
		t.Fatal(err)
	}
	byEnv := map[string]string{}
	for _, o := range options {
		if o.Env == "" {
			t.Errorf("option %s has no variable to fall back on", o.Name)
		}
		byEnv[o.Env] = o.Default
	}
	fromDefaults, err := configFromEnv(func(name string) string { return byEnv[name] })
	if err != nil {
		t.Fatalf("ConfigFromEnv(the schema's defaults): %v", err)
	}
	plain, err := configFromEnv(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromDefaults, plain) {
		t.Fatalf("the schema's defaults give %+v, no variables give %+v", fromDefaults, plain)
	}
}
