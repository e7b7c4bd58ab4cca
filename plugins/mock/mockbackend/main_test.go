package mockbackend

import (
	"os"
	"strings"
	"testing"
)

// TestMain clears the user's WCACHE_MOCK_* variables: the tests read them
// (ConfigFromEnv) and set those they need.
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "WCACHE_MOCK_") {
			os.Unsetenv(k)
		}
	}
	os.Exit(m.Run())
}
