package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/plugins/mock/mockbackend"
)

// buildWcacheWithMock builds wcache and wcache-backend-mock side by side,
// as `make build` installs them, so that wcache finds the plugin next to
// itself.
func buildWcacheWithMock(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp(t.TempDir(), "bin-")
	if err != nil {
		t.Fatal(err)
	}
	for bin, pkg := range map[string]string{
		"wcache":              "github.com/wcache/wcache/cmd/wcache",
		"wcache-backend-mock": "github.com/wcache/wcache/plugins/mock",
	} {
		if err := childproc.GoBuild(filepath.Join(dir, bin), pkg, false); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runWcache runs the built binary with extra environment and returns
// stdout, stderr and the exit code.
func runWcache(t *testing.T, bin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "wcache"), args...)
	// The user's WCACHE_* variables are not the test's: only env counts.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WCACHE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		code = xe.ExitCode()
	} else if err != nil {
		t.Fatalf("run wcache %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

func TestDevicesThroughTheRealBinary(t *testing.T) {
	bin := buildWcacheWithMock(t)
	shm := filepath.Join(t.TempDir(), "shm")
	env := []string{"WCACHE_MOCK_DEVICES=3", "WCACHE_MOCK_MEMORY=512MiB", "WCACHE_MOCK_DIR=" + shm,
		"WCACHE_PLUGIN_DIR=", "WCACHE_BACKEND="}

	t.Run("Table", func(t *testing.T) {
		out, errOut, code := runWcache(t, bin, env, "devices", "--backend", "mock")
		if code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "ORDINAL") || !strings.Contains(lines[0], "UUID") {
			t.Fatalf("table:\n%s", out)
		}
		for i, line := range lines[1:] {
			f := strings.Fields(line)
			if f[0] != string(rune('0'+i)) || f[1] != mockbackend.DeviceUUID(i) || !strings.Contains(line, "512.0 MiB") {
				t.Errorf("row %d = %q, want ordinal %d, UUID %s, 512.0 MiB", i, line, i, mockbackend.DeviceUUID(i))
			}
		}
	})

	t.Run("JSON", func(t *testing.T) {
		out, errOut, code := runWcache(t, bin, append(env, "WCACHE_MOCK_DEVICES=GPU-aaaa,MIG-bbbb"), "devices", "--backend", "mock", "--json")
		if code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", code, errOut)
		}
		var devs []deviceJSON
		if err := json.Unmarshal([]byte(out), &devs); err != nil {
			t.Fatalf("output is not a JSON array of devices: %v\n%s", err, out)
		}
		if len(devs) != 2 || devs[0].UUID != "GPU-aaaa" || devs[1].UUID != "MIG-bbbb" || devs[1].Ordinal != 1 ||
			devs[0].TotalMemoryBytes != 512<<20 || devs[0].FreeMemoryBytes != 512<<20 || devs[0].Capability != "mock" {
			t.Fatalf("devices = %+v", devs)
		}
	})

	t.Run("BackendFromEnvironment", func(t *testing.T) {
		out, errOut, code := runWcache(t, bin, append(env, "WCACHE_BACKEND=mock", "WCACHE_MOCK_DEVICES=0"), "devices", "--json")
		if code != 0 || strings.TrimSpace(out) != "[]" {
			t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, out, errOut)
		}
	})

	t.Run("MissingPluginListsFolders", func(t *testing.T) {
		pluginDir := t.TempDir()
		_, errOut, code := runWcache(t, bin, env, "devices", "--backend", "nosuch", "--plugin-dir", pluginDir)
		if code != ExitFailure || !strings.Contains(errOut, "wcache-backend-nosuch") ||
			!strings.Contains(errOut, pluginDir) || !strings.Contains(errOut, bin) {
			t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 naming the binary and the folders searched", code, errOut)
		}
	})

	t.Run("BadArgumentsAreUsageErrors", func(t *testing.T) {
		for _, args := range [][]string{
			{"devices", "--backend", "../mock"},
			{"devices", "--backend", "mock", "--plugin-sha256", "xyz"},
		} {
			if _, errOut, code := runWcache(t, bin, env, args...); code != ExitUsage {
				t.Errorf("wcache %v: exit %d, want %d; stderr:\n%s", args, code, ExitUsage, errOut)
			}
		}
	})

	t.Run("PluginErrorIsShown", func(t *testing.T) {
		_, errOut, code := runWcache(t, bin, append(env, "WCACHE_MOCK_MEMORY=lots"), "devices", "--backend", "mock")
		if code != ExitFailure || !strings.Contains(errOut, `WCACHE_MOCK_MEMORY="lots"`) {
			t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 with the plugin's explanation", code, errOut)
		}
	})

	if files, _ := filepath.Glob(filepath.Join(shm, "*.shm")); len(files) != 0 {
		t.Errorf("allocation files left behind: %v", files)
	}
}
