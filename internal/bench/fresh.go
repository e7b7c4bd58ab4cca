package bench

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

// Embedded Python helpers, written into the scenario's world before use.
var (
	//go:embed py/read_numpy.py
	pyReadNumpy string
	//go:embed py/attach_torch.py
	pyAttachTorch string
)

// freshResult is one fresh process: what it measured inside, and the wall
// time of the whole process from fork/exec to exit as its parent saw it.
type freshResult struct {
	HelperResult
	Versions map[string]string `json:"versions,omitempty"`
	Wall     time.Duration     `json:"-"`
}

// runFresh runs cmd to completion and decodes the JSON object it prints
// last on stdout.
func runFresh(ctx context.Context, cmd *exec.Cmd) (freshResult, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return freshResult{}, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, tail(stderr.String(), 4000))
	}
	out := strings.TrimSpace(stdout.String())
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	var r freshResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return freshResult{}, fmt.Errorf("%s: result %q: %w", strings.Join(cmd.Args, " "), out, err)
	}
	r.Wall = wall
	return r, nil
}

// helperCmd is a fresh Go process running the helper mode with args, in
// the world's environment.
func (w *world) helperCmd(ctx context.Context, mode string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, w.o.HelperArgv[1:]...), mode), args...)
	cmd := exec.CommandContext(ctx, w.o.HelperArgv[0], argv...)
	cmd.Env = w.Env(w.o.HelperEnv...)
	return cmd
}

// pythonCmd is a fresh Python process running an embedded script (written
// into the world's root on first use) with args, importing the wcache
// client from the source tree.
func (w *world) pythonCmd(ctx context.Context, name, source string, args ...string) (*exec.Cmd, error) {
	path := filepath.Join(w.Root, name)
	if _, err := os.Stat(path); err != nil {
		if err := os.WriteFile(path, []byte(source), 0o600); err != nil {
			return nil, fmt.Errorf("python helper %s: %w", name, err)
		}
	}
	src, err := filepath.Abs(filepath.Join(w.o.RepoDir, "clients", "python", "src"))
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, w.o.Python, append([]string{path}, args...)...)
	cmd.Env = w.Env("PYTHONPATH="+src, "PYTHONDONTWRITEBYTECODE=1")
	return cmd, nil
}
