package childproc

import (
	"fmt"
	"os"
	"os/exec"
)

// GoBuild builds the package pkg (a folder; a relative one is taken from
// the working directory, a test's own package folder) into the binary
// out, with cgo on or off (CGO_ENABLED).
func GoBuild(out, pkg string, cgo bool) error {
	enabled := "0"
	if cgo {
		enabled = "1"
	}
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+enabled)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
	}
	return nil
}
