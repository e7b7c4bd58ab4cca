package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemo runs what `make demo` runs and checks that it reports success
// for every step and removes everything it made.
func TestDemo(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	dir := filepath.Join(h.Root, "demo")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	res := h.run("demo", "--dir", dir)
	if res.Code != 0 {
		t.Fatalf("demo failed:\n%s", res)
	}
	for _, want := range []string{
		"[1/6] checkpoint", "219 tensors per rank",
		"[2/6] devices: 4 mock GPUs",
		"[3/6] launch", "2 daemons ready",
		"tp 0 -> GPU 0", "tp 1 -> GPU 1",
		"verified 219 tensors", "byte for byte",
		"refused", "tp_rank: daemon=0 client=1",
		"wcache launch stopped every daemon and exited 0",
		"no socket, ready file or shared-memory allocation left",
		"demo OK: 2 daemons launched, attached, verified byte for byte and stopped cleanly",
		"removed " + dir + "/wcache-demo-",
	} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("demo output lacks %q\n%s", want, res)
		}
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("demo left %d entries in %s (%v)", len(entries), dir, err)
	}
}

// TestDemoKeep leaves the working folder, with the checkpoint, in place.
func TestDemoKeep(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	dir := filepath.Join(h.Root, "demo")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	res := h.run("demo", "--dir", dir, "--keep", "--layers", "2", "--tp-size", "1")
	if res.Code != 0 || !strings.Contains(res.Stdout, "demo OK: 1 daemons") || !strings.Contains(res.Stdout, "kept ") {
		t.Fatalf("demo --keep:\n%s", res)
	}
	kept, err := filepath.Glob(filepath.Join(dir, "wcache-demo-*", "model", "model-rank-0-part-*.safetensors"))
	if err != nil || len(kept) != 2 {
		t.Fatalf("kept checkpoint files: %v (%v)", kept, err)
	}
	for _, bad := range [][]string{{"--layers", "0"}, {"--tp-size", "5"}} {
		if res := h.run(append([]string{"demo", "--dir", dir}, bad...)...); res.Code != 2 {
			t.Errorf("demo %v: want exit 2\n%s", bad, res)
		}
	}
}
