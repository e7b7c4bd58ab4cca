package cli

import (
	"strings"
	"testing"
)

// TestVersionFlag: `wcache --version` prints what `wcache version` prints.
func TestVersionFlag(t *testing.T) {
	flag, _, code, _ := runInProcess(t, "--version")
	cmd, _, code2, _ := runInProcess(t, "version")
	if code != 0 || code2 != 0 || flag != cmd || !strings.HasPrefix(flag, "wcache ") {
		t.Errorf("--version: exit %d %q; version: exit %d %q", code, flag, code2, cmd)
	}
}
