package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackendNotChosenHint: without --backend the default (cuda) is looked
// for; when it cannot run, the error is followed by one hint saying that it
// was the default, which backends are installed and how to choose one.
func TestBackendNotChosenHint(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "wcache-backend-mock"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envBackend, "")
	_, stderr, code, _ := runInProcess(t, "devices", "--plugin-dir", dir)
	for _, want := range []string{`the backend "cuda" is the default: neither --backend nor $WCACHE_BACKEND is set`,
		"installed backends: mock", "--backend NAME or WCACHE_BACKEND=NAME", "--backend mock runs without a GPU"} {
		if code != ExitFailure || !strings.Contains(stderr, want) {
			t.Errorf("devices without --backend: exit %d, stderr %q; want exit 1 and %q", code, stderr, want)
		}
	}
	if n := strings.Count(stderr, "\n"); n != 2 {
		t.Errorf("want the error and one hint, got %d lines:\n%s", n, stderr)
	}
	t.Setenv(envBackend, "rocm")
	if _, stderr, _, _ := runInProcess(t, "devices", "--plugin-dir", dir); !strings.Contains(stderr, "chosen by $WCACHE_BACKEND") {
		t.Errorf("WCACHE_BACKEND=rocm: %q does not say where the choice came from", stderr)
	}
}

// TestPickleCheckpointHint: a folder with only pytorch_model.bin is refused
// (no safetensors files) with a hint that .bin is not read and how to
// convert it; an empty folder gets no such hint.
func TestPickleCheckpointHint(t *testing.T) {
	bin, empty := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "pytorch_model.bin"), []byte("not read"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code, _ := runInProcess(t, "attach", "--socket", "/nonexistent.sock", "--model", bin, "--device-capability", "x")
	for _, want := range []string{"no safetensors files", "holds pytorch_model.bin", "not read", "safe_serialization=True"} {
		if code != ExitFailure || !strings.Contains(stderr, want) {
			t.Errorf("attach --model (only pytorch_model.bin): exit %d, stderr %q; want exit 1 and %q", code, stderr, want)
		}
	}
	_, stderr, _, _ = runInProcess(t, "attach", "--socket", "/nonexistent.sock", "--model", empty, "--device-capability", "x")
	if strings.Contains(stderr, "hint") {
		t.Errorf("an empty folder got a hint: %q", stderr)
	}
}

// TestNoBackendHintForAPluginThatFailed: a plugin that exits before the
// handshake explains itself; choosing another backend is no answer.
func TestNoBackendHintForAPluginThatFailed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "wcache-backend-mock"), []byte("#!/bin/sh\necho broken >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, stderr, code, _ := runInProcess(t, "devices", "--backend", "mock", "--plugin-dir", dir)
	if code != ExitFailure || !strings.Contains(stderr, "failed to start") || strings.Contains(stderr, "hint") {
		t.Errorf("a plugin that exits at once: exit %d, stderr %q; want exit 1, its failure, no hint", code, stderr)
	}
}
