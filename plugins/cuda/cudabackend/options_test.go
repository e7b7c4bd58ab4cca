package cudabackend

import (
	"reflect"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// The defaults the schema shows are the ones ConfigFromEnv applies.
func TestOptionDefaultsMatchConfigFromEnv(t *testing.T) {
	if err := sdk.ValidateSchema(Options()); err != nil {
		t.Fatal(err)
	}
	byEnv := map[string]string{}
	for _, o := range Options() {
		byEnv[o.Env] = o.Default
	}
	fromDefaults, err := ConfigFromEnv(func(name string) string { return byEnv[name] })
	if err != nil {
		t.Fatalf("ConfigFromEnv(the schema's defaults): %v", err)
	}
	plain, err := ConfigFromEnv(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromDefaults, plain) {
		t.Fatalf("the schema's defaults give %+v, no variables give %+v", fromDefaults, plain)
	}
}
