package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// readyState reports whether `wcache status --check` passes a daemon in
// state: it answers and serves, or waits for (or takes) a publish.
func readyState(state string) bool {
	switch state {
	case "serving", "empty", "publishing":
		return true
	}
	return false
}

// checkStatus prints the verdict of `wcache status --check` on rows and
// returns nil when every daemon is ready and there is at least one; an
// error with ExitNoDaemon when there is none and ExitFailure when one is
// not ready (Main prints it on stderr; the line on w names them too).
func checkStatus(w io.Writer, rows []daemonStatus) error {
	if len(rows) == 0 {
		fmt.Fprintln(w, "not ready: no wcache daemon")
		return withCode(ExitNoDaemon, errNoDaemons)
	}
	var bad []string
	for _, r := range rows {
		if !readyState(r.State) {
			bad = append(bad, fmt.Sprintf("GPU %d (%s) %s", r.GPU, r.DeviceUUID, r.State))
		}
	}
	if len(bad) > 0 {
		fmt.Fprintf(w, "not ready: %d of %d daemons: %s\n", len(bad), len(rows), strings.Join(bad, "; "))
		return withCode(ExitFailure, errors.New("status --check: "+strings.Join(bad, "; ")))
	}
	noun := "daemons"
	if len(rows) == 1 {
		noun = "daemon"
	}
	_, err := fmt.Fprintf(w, "ready: %d %s\n", len(rows), noun)
	return err
}
