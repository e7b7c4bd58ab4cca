package bench

// Fresh processes, run to completion: this binary re-executed as
// `wcache-bench helper …` and the embedded Python scripts.

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Embedded Python helpers, written into a world by script before use.
var (
	//go:embed py/read_numpy.py
	pyReadNumpy string
	//go:embed py/attach_torch.py
	pyAttachTorch string
)

// script writes source into the world's root as name and returns its path.
func (w *world) script(name, source string) (string, error) {
	path := filepath.Join(w.Root, name)
	if err := os.WriteFile(path, []byte(source), 0o600); err != nil {
		return "", fmt.Errorf("python helper %s: %w", name, err)
	}
	return path, nil
}

// helperArgv is a fresh Go process running the helper mode with args.
func (w *world) helperArgv(mode string, args ...string) []string {
	return append(append(append([]string{}, w.o.HelperArgv...), mode), args...)
}

// fresh runs argv to completion in the world's environment and decodes the
// HelperResult it prints last on stdout; Wall is the whole process, from
// fork/exec to exit, as its parent saw it.
func (w *world) fresh(ctx context.Context, argv ...string) (HelperResult, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = w.Env(w.o.HelperEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return HelperResult{}, fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, tail(stderr.String()))
	}
	out := strings.TrimSpace(stdout.String())
	out = out[strings.LastIndexByte(out, '\n')+1:]
	var r HelperResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return HelperResult{}, fmt.Errorf("%s: result %q: %w", strings.Join(argv, " "), out, err)
	}
	r.Wall = wall
	return r, nil
}

// tail is the last 3000 bytes of s.
func tail(s string) string {
	const n = 3000
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
