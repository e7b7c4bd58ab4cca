package cli

import (
	"os"
	"strings"
	"testing"
)

// TestServeChecksItsFlagsInOrder: each of serve's own checks answers with
// its message and exit 2, before anything is created; with two bad flags
// the one checked first is named (models, then logging, content policies,
// peer fill, metrics, memory bounds), so the order is part of what a user
// sees.
func TestServeChecksItsFlagsInOrder(t *testing.T) {
	model := t.TempDir()
	serve := []string{"serve", "--backend", "mock", "--gpu-id", "0"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--draft-model", model}, `--draft-model needs --model (the target it drafts for)`},
		{[]string{"--model", ""}, `--model "": want a checkpoint directory or a hub id`},
		{[]string{"--model", model, "--log-format", "xml"}, `--log-format "xml": want text or json`},
		{[]string{"--model", model, "--content-policies", "identity,trust-me"}, `--content-policies: "trust-me": want identity, hash or headers`},
		{[]string{"--model", model, "--peer-fill", "maybe"}, `--peer-fill "maybe": want auto or off`},
		{[]string{"--model", model, "--metrics-allow-remote"}, `--metrics-allow-remote needs --metrics-listen`},
		{[]string{"--model", model, "--max-bytes", "120%"}, `--max-bytes "120%": want a percentage above 0 and at most 100 such as 80%`},
		{[]string{"--model", model, "--max-bytes", "0"}, `--max-bytes "0": want a size above 0 such as 40GiB`},
		{[]string{"--model", model, "--reserve-bytes", "lots"}, `--reserve-bytes: `},
		// Two bad flags: the earlier check wins.
		{[]string{"--log-level", "loud", "--log-format", "xml", "--draft-model", model}, `--draft-model needs --model`},
		{[]string{"--model", model, "--peer-fill", "maybe", "--log-format", "xml"}, `--log-format "xml"`},
		{[]string{"--model", model, "--max-bytes", "0", "--peer-fill", "maybe"}, `--peer-fill "maybe"`},
		{[]string{"--model", model, "--reserve-bytes", "lots", "--metrics-allow-remote"}, `--metrics-allow-remote needs --metrics-listen`},
	} {
		args := append(append([]string{}, serve...), c.args...)
		_, stderr, code, run := runInProcess(t, args...)
		if code != ExitUsage || !strings.Contains(stderr, "wcache: "+c.want) {
			t.Errorf("wcache %s: exit %d, stderr %q; want exit 2 with %q", strings.Join(args, " "), code, stderr, c.want)
		}
		if entries, err := os.ReadDir(run); err != nil || len(entries) != 0 {
			t.Errorf("wcache %s: the runtime dir holds %v (%v); a usage error creates nothing", strings.Join(args, " "), entries, err)
		}
	}
}
