package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/plugins/cuda/internal/fakelib"
	"github.com/wcache/wcache/plugins/internal/gputest"
)

// TestServeStopsWithTheStickyReason runs the real `wcache serve --backend
// cuda` on the fake driver, injects a sticky CUDA error (700) once it
// serves and is idle (only the health probe calls the driver), and checks
// what an operator sees: serve exits non-zero, and its
// output names the plugin's exit and the CUDA error, not just "plugin
// exited".
func TestServeStopsWithTheStickyReason(t *testing.T) {
	if fakelib.Real(os.Getenv) {
		t.Skip("needs the fake driver's fault injection")
	}
	trigger := filepath.Join(t.TempDir(), "sticky")
	w := gputest.NewWorld(t, "cuda", os.Getenv(pluginsEnv), 64<<10,
		pluginEnv(t, "", "FAKECUDA_STICKY_FILE="+trigger, "WCACHE_CUDA_HEALTH_INTERVAL=200ms"))
	d := w.Start("serving ", append(append([]string{"serve"}, w.BackendArgs()...), "--gpu-id", "0", "--model", w.Model)...)
	if err := os.WriteFile(trigger, []byte("700"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Nothing calls the driver now: the plugin's health probe must find
	// the error on its own.
	var err error
	select {
	case err = <-d.Done:
		d.Done <- err
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still running 30 s after a sticky error:\n%s", d.Output())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("serve ended with %v, want a non-zero exit:\n%s", err, d.Output())
	}
	out := d.Output()
	for _, want := range []string{"backend plugin exited", "exit status 3", "sticky error", "CUDA_ERROR_ILLEGAL_ADDRESS (700)"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve's output does not name %q:\n%s", want, out)
		}
	}
}
