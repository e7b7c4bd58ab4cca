package cli

import (
	"os/exec"
	"strings"
	"testing"
)

// TestShippedBinaryLinksNoTestHelpers: wcache must not link a test helper
// package of this module (safetensorstest, backendtest, testproc, ...).
func TestShippedBinaryLinksNoTestHelpers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/wcache/wcache/cmd/wcache").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if !strings.HasPrefix(pkg, "github.com/wcache/wcache/") {
			continue
		}
		last := pkg[strings.LastIndex(pkg, "/")+1:]
		if strings.HasSuffix(last, "test") || strings.HasPrefix(last, "test") || strings.Contains(pkg, "/test/e2e") {
			t.Errorf("cmd/wcache links the test helper %s", pkg)
		}
	}
}
