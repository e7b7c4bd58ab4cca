package cudabackend

import (
	"testing"

	"github.com/wcache/wcache/plugins/internal/testkit/optiontest"
)

// The defaults the schema shows are the ones ConfigFromEnv applies.
func TestOptionDefaultsMatchConfigFromEnv(t *testing.T) {
	optiontest.CheckDefaults(t, Options(), ConfigFromEnv)
}
