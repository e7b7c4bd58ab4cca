package pluginhost

import (
	"errors"
	"fmt"
	"os"

	"github.com/wcache/wcache/core/safefile"
)

// checkPlugin resolves candidate (symbolic links followed) and refuses a
// plugin that another user could replace or modify (safefile.Check, the
// rule every file the daemon trusts follows): a regular, executable file
// owned by root or by us, not writable by group or others, reached only
// through directories (the links' included) that root or we own and that
// others cannot write (unless sticky). Otherwise anyone with write access
// could run code as the wcache user. It returns the resolved path.
func checkPlugin(candidate string) (string, error) {
	real, _, err := safefile.Check(candidate, os.Geteuid(), safefile.Rule{Executable: true})
	var ue *safefile.UntrustedError
	switch {
	case errors.As(err, &ue):
		reason := ue.Reason
		if ue.Path != ue.File {
			reason += " (on the way to " + ue.File + ")"
		}
		return "", &InsecurePluginError{Path: ue.Path, Reason: reason}
	case err != nil:
		return "", fmt.Errorf("inspect backend plugin %s: %w", candidate, err)
	}
	return real, nil
}
