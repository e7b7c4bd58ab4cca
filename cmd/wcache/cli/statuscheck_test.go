package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestStatusCheckVerdicts: --check passes only when there is a daemon and
// every daemon is serving, empty or publishing, and names those that are not.
func TestStatusCheckVerdicts(t *testing.T) {
	row := func(gpu int, state string) daemonStatus {
		return daemonStatus{GPU: gpu, DeviceUUID: "GPU-" + state, State: state}
	}
	for _, c := range []struct {
		name string
		rows []daemonStatus
		code int
		line string
	}{
		{"none", nil, ExitNoDaemon, "not ready: no wcache daemon"},
		{"serving, empty, publishing", []daemonStatus{row(0, "serving"), row(1, "empty"), row(2, "publishing")}, ExitOK, "ready: 3 daemons"},
		{"one stale", []daemonStatus{row(0, "serving"), row(1, "stale")}, ExitFailure, "not ready: 1 of 2 daemons: GPU 1 (GPU-stale) stale"},
		{"draining and unreachable", []daemonStatus{row(0, "draining"), row(1, "unreachable")}, ExitFailure,
			"not ready: 2 of 2 daemons: GPU 0 (GPU-draining) draining; GPU 1 (GPU-unreachable) unreachable"},
	} {
		var out bytes.Buffer
		err := checkStatus(&out, c.rows)
		code := ExitOK
		if xe, ok := err.(*exitError); ok {
			code = xe.code
		} else if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if code != c.code || strings.TrimSpace(out.String()) != c.line {
			t.Errorf("%s: exit %d, %q; want exit %d, %q", c.name, code, out.String(), c.code, c.line)
		}
	}
}

// TestStatusCheckThroughMain: with no daemon, `status --check` exits 3 and
// says so; --check and --json exclude each other.
func TestStatusCheckThroughMain(t *testing.T) {
	stdout, _, code, _ := runInProcess(t, "status", "--check")
	if code != ExitNoDaemon || !strings.Contains(stdout, "not ready: no wcache daemon") {
		t.Errorf("status --check with no daemon: exit %d, %q", code, stdout)
	}
	_, stderr, code, _ := runInProcess(t, "status", "--check", "--json")
	if code == ExitOK || !strings.Contains(stderr, "check") {
		t.Errorf("status --check --json: exit %d, %q; want a refusal", code, stderr)
	}
}
