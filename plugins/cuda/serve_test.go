package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/plugins/cuda/internal/fakelib"
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
	dir := t.TempDir()
	plugins := os.Getenv(pluginsEnv)
	wcache := filepath.Join(dir, "wcache")
	build := exec.Command("go", "build", "-o", wcache, "github.com/wcache/wcache/cmd/wcache")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building wcache: %v\n%s", err, out)
	}
	model := filepath.Join(dir, "model")
	writeSafetensors(t, filepath.Join(model, "model.safetensors"), 64<<10)
	trigger := filepath.Join(dir, "sticky")
	cmd := exec.Command(wcache, "serve", "--backend", "cuda", "--plugin-dir", plugins,
		"--gpu-id", "0", "--model", model)
	// A short runtime folder: socket paths are limited to 107 bytes.
	run, err := os.MkdirTemp("", "wc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(run) })
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+run)
	cmd.Env = append(cmd.Env, pluginEnv(t, "", "FAKECUDA_STICKY_FILE="+trigger, "WCACHE_CUDA_HEALTH_INTERVAL=200ms")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "serving ") {
				ready <- sc.Text()
			}
		}
		close(ready)
	}()
	select {
	case line, ok := <-ready:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("serve ended before serving:\n%s", stderr.String())
		}
		t.Log(line)
	case <-time.After(60 * time.Second):
		t.Fatalf("serve not ready after 60 s:\n%s", stderr.String())
	}
	if err := os.WriteFile(trigger, []byte("700"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Nothing calls the driver now: the plugin's health probe must find
	// the error on its own.
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still running 30 s after a sticky error:\n%s", stderr.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("serve ended with %v, want a non-zero exit:\n%s", err, stderr.String())
	}
	out := stderr.String()
	for _, want := range []string{"backend plugin exited", "exit status 3", "sticky error", "CUDA_ERROR_ILLEGAL_ADDRESS (700)"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve's output does not name %q:\n%s", want, out)
		}
	}
}

// writeSafetensors writes one F32 tensor of n bytes.
func writeSafetensors(t *testing.T, path string, n int) {
	t.Helper()
	header, err := json.Marshal(map[string]any{
		"w": map[string]any{"dtype": "F32", "shape": []int{n / 4}, "data_offsets": []int{0, n}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.Write(header)
	for i := 0; i < n; i++ {
		b.WriteByte(byte(i * 7))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
