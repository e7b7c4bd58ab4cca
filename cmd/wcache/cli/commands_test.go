package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// runInProcess runs wcache args through Main with a private, empty
// XDG_RUNTIME_DIR and no template variables. It returns stdout, stderr, the
// exit code and the runtime dir.
func runInProcess(t *testing.T, args ...string) (string, string, int, string) {
	t.Helper()
	run := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", run)
	t.Setenv("WCACHE_SOCKET_TEMPLATE", "")
	t.Setenv("WCACHE_READY_TEMPLATE", "")
	var stdout, stderr bytes.Buffer
	code := Main(args, strings.NewReader(""), &stdout, &stderr)
	return stdout.String(), stderr.String(), code, run
}

// TestCommandsRefuseBadInputBeforeTouchingAnything: usage errors exit 2 and
// create nothing (no private directory, no plugin started).
func TestCommandsRefuseBadInputBeforeTouchingAnything(t *testing.T) {
	model := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model, "--socket-template", "/tmp/wcache.sock"}, "{device_uuid}"},
		{[]string{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model, "--socket-template", "/tmp/{rank}/{device_uuid}.sock"}, "{rank}"},
		{[]string{"serve", "--backend", "mock", "--model", model}, "--gpu-id is required"},
		{[]string{"serve", "--backend", "mock", "--gpu-id", "0", "--shard-pattern", "m-{tp_rank}"}, "--shard-pattern needs --model"},
		{[]string{"publish", "--socket", "/x.sock"}, "--model is required"},
		{[]string{"publish", "--model", model}, "name a daemon"},
		{[]string{"publish", "--socket", "/x.sock", "--gpu-id", "0", "--model", model}, "exclude each other"},
		{[]string{"evict"}, "or pass --all"},
		{[]string{"evict", "--all", "--gpu-id", "0"}, "or pass --all"},
		{[]string{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model, "--tp-rank", "1"}, "tp_rank"},
		{[]string{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model, "--log-level", "loud"}, "--log-level"},
		{[]string{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model, "--socket-group", "no-such-group-wcache"}, "--socket-group"},
		{[]string{"attach", "--socket", "/x.sock", "--model", model, "--ready-template", "/tmp/ready"}, "{device_uuid}"},
		{[]string{"attach", "--socket", "/x.sock"}, "--model is required"},
		{[]string{"attach", "--socket", "/x.sock", "--device-uuid", "GPU-1", "--model", model}, "exclude each other"},
		{[]string{"attach", "--backend", "mock", "--model", model}, "--gpu-id is required"},
		{[]string{"attach", "--socket", "/x.sock", "--model", model, "--verify"}, "--gpu-id is required"},
		{[]string{"stop"}, "--device-uuid"},
		{[]string{"stop", "--device-uuid", "GPU-1", "--all"}, "exclude each other"},
		{[]string{"stop", "--device-uuid", "../etc"}, "UUID"},
		{[]string{"cleanup"}, "--device-uuid"},
		{[]string{"status", "--socket-template", "/tmp/x.sock"}, "{device_uuid}"},
		{[]string{"serve", "--no-such-flag"}, "unknown flag"},
		{[]string{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model, "--peer-listen", "10.0.0.1:7450"}, "--peer-cert, --peer-key and --peer-ca"},
		{[]string{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model, "--peers", "a:1", "--peer-cert", "c", "--peer-key", "k"}, "--peer-ca"},
		{[]string{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model, "--peer-cert", "c"}, "need --peer-listen or --peers"},
		{[]string{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model, "--peers", "a:1", "--peer-cert", "c", "--peer-key", "k", "--peer-ca", "a", "--peer-rate", "1GiB"}, "--peer-rate needs --peer-listen"},
		{[]string{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model, "--peer-listen", ":1", "--peer-cert", "c", "--peer-key", "k", "--peer-ca", "a", "--peer-rate", "fast"}, "--peer-rate"},
		{[]string{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model, "--peer-listen", ":1", "--peer-cert", "c", "--peer-key", "k", "--peer-ca", "a", "--peer-fill-timeout", "1s"}, "need --peers"},
		{[]string{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model, "--peers", "a:1", "--peer-cert", "c", "--peer-key", "k", "--peer-ca", "a", "--peer-fill-min-rate", "fast"}, "--peer-fill-min-rate"},
		{[]string{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model, "--peers", "a:1", "--peer-cert", "c", "--peer-key", "k", "--peer-ca", "a", "--peer-fill-rate-window", "0s"}, "--peer-fill-rate-window"},
	} {
		_, stderr, code, run := runInProcess(t, c.args...)
		if code != ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("wcache %s: exit %d, stderr %q; want exit 2 mentioning %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
		if entries, _ := os.ReadDir(run); len(entries) != 0 {
			t.Errorf("wcache %s created %v", strings.Join(c.args, " "), entries)
		}
	}
}

func TestNoDaemonsFound(t *testing.T) {
	stdout, _, code, _ := runInProcess(t, "status")
	if code != 0 || !strings.Contains(stdout, "no wcache daemons") {
		t.Errorf("status: exit %d, %q", code, stdout)
	}
	stdout, _, code, _ = runInProcess(t, "status", "--json")
	if code != 0 || strings.TrimSpace(stdout) != "[]" {
		t.Errorf("status --json: exit %d, %q", code, stdout)
	}
	for _, args := range [][]string{{"stop", "--all"}, {"cleanup", "--all"}, {"stop", "--device-uuid", "GPU-1"}} {
		_, stderr, code, _ := runInProcess(t, args...)
		if code != ExitNoDaemon {
			t.Errorf("%v: exit %d (%s), want 3", args, code, stderr)
		}
	}
	_, stderr, code, _ := runInProcess(t, "attach", "--socket", "/nonexistent/wcache.sock", "--model", writeTinyModel(t),
		"--device-capability", "x")
	if code != ExitNoDaemon || !strings.Contains(stderr, "does not exist") {
		t.Errorf("attach to an absent socket: exit %d, %s", code, stderr)
	}
}

func TestCleanupReportsNothing(t *testing.T) {
	stdout, stderr, code, _ := runInProcess(t, "cleanup", "--device-uuid", "GPU-1")
	if code != 0 || !strings.Contains(stdout, "nothing to clean") {
		t.Errorf("cleanup: exit %d, %q %q", code, stdout, stderr)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		16 << 30: "16.0 GiB", 3 << 40: "3.0 TiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// writeTinyModel writes a one-tensor safetensors checkpoint.
func writeTinyModel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	err := safetensorstest.WriteFile(filepath.Join(dir, "model.safetensors"),
		[]safetensorstest.Tensor{{Name: "w", DType: safetensors.U8, Shape: []uint64{8}, Data: []byte("01234567")}})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
