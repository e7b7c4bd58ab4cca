package testproc

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/wcache/wcache/core/paths"
)

// WorldOptions configure NewWorld.
type WorldOptions struct {
	// Prefix starts the name of Root, a new folder in os.TempDir. Keep it
	// short: Unix socket paths are limited to 107 bytes.
	Prefix string
	// Devices is the number of mock devices (default 1).
	Devices int
	// MockDir is the mock backend's shared-memory folder, created by the
	// caller and removed by Close ("": Root/shm, created here).
	MockDir string
	// PluginDir is WCACHE_PLUGIN_DIR, where the binaries are ("": unset).
	PluginDir string
	// TempDir gives every process TMPDIR=Root/tmp, so that the plugin
	// socket folders of killed processes stay inside Root.
	TempDir bool
	// Keep names inherited WCACHE_ variables the processes keep (a test's
	// own, such as the folder of the built binaries).
	Keep []string
}

// World is a private environment of daemons and clients, as the e2e tests
// and the benchmarks run them: a short temporary Root holding
// XDG_RUNTIME_DIR (so sockets and ready files are private) and
// XDG_CACHE_HOME (the digest cache: Root/cache, created on first use), the mock
// backend's shared-memory folder, mock device UUIDs of its own (worlds side
// by side must not share devices, the point of UUID-keyed discovery), and
// the environment of every process started in it.
type World struct {
	Root, RuntimeDir, MockDir string
	// UUIDs are the mock devices' UUIDs, by ordinal.
	UUIDs []string

	keep []string
	env  []string
}

// NewWorld creates the folders of a new World. On an error it leaves
// nothing behind.
func NewWorld(o WorldOptions) (w *World, err error) {
	root, err := os.MkdirTemp("", o.Prefix)
	if err != nil {
		return nil, fmt.Errorf("world: %w", err)
	}
	w = &World{Root: root, RuntimeDir: filepath.Join(root, "run"), MockDir: o.MockDir, keep: o.Keep}
	defer func() {
		if err != nil {
			_ = w.Close()
			err = fmt.Errorf("world: %w", err)
		}
	}()
	dirs := []string{w.RuntimeDir}
	if w.MockDir == "" {
		w.MockDir = filepath.Join(root, "shm")
		dirs = append(dirs, w.MockDir)
	}
	if o.TempDir {
		dirs = append(dirs, filepath.Join(root, "tmp"))
		w.env = append(w.env, "TMPDIR="+filepath.Join(root, "tmp"))
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
	}
	tag := rand.Uint32()
	for i := range max(o.Devices, 1) {
		w.UUIDs = append(w.UUIDs, fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", tag, i))
	}
	// XDG_CACHE_HOME: the digest cache (daemons record what they load in
	// it, fills and clients look it up) is the world's own, never the
	// user's.
	w.Setenv("XDG_RUNTIME_DIR="+w.RuntimeDir, "WCACHE_MOCK_DIR="+w.MockDir,
		"WCACHE_MOCK_DEVICES="+strings.Join(w.UUIDs, ","), "XDG_CACHE_HOME="+filepath.Join(root, "cache"))
	if o.PluginDir != "" {
		w.Setenv("WCACHE_PLUGIN_DIR=" + o.PluginDir)
	}
	return w, nil
}

// Setenv adds "KEY=VALUE" pairs to the environment of the processes
// started from now on; a later value of a key wins.
func (w *World) Setenv(kv ...string) { w.env = append(w.env, kv...) }

// Env is the environment of every process of the world: this process's,
// minus the wcache variables that could leak in (WCACHE_*, but those of
// WorldOptions.Keep, XDG_RUNTIME_DIR, CUDA_VISIBLE_DEVICES, and TMPDIR
// when the world has its own), plus the world's own and extra.
func (w *World) Env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		leak := strings.HasPrefix(k, "WCACHE_") && !slices.Contains(w.keep, k) || k == "XDG_RUNTIME_DIR" ||
			k == "CUDA_VISIBLE_DEVICES" || k == "TMPDIR" && w.sets("TMPDIR")
		if !leak {
			out = append(out, kv)
		}
	}
	return append(append(out, w.env...), extra...)
}

// sets reports whether the world itself sets key.
func (w *World) sets(key string) bool {
	return slices.ContainsFunc(w.env, func(kv string) bool { return strings.HasPrefix(kv, key+"=") })
}

// Getenv looks a variable up in Env, the last value winning, as a
// process of the world sees it ("" when unset).
func (w *World) Getenv(key string) string {
	env := w.Env()
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// Layout is the default discovery layout in the world's environment.
func (w *World) Layout() (paths.Layout, error) {
	return paths.NewLayout(paths.Options{Getenv: w.Getenv})
}

// Close removes the world's folders (the shared memory included). Stop
// its processes first.
func (w *World) Close() error {
	return errors.Join(os.RemoveAll(w.MockDir), os.RemoveAll(w.Root))
}

// ChildPIDs lists the pids whose parent is pid, from /proc.
func ChildPIDs(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		var child int
		if _, err := fmt.Sscanf(e.Name(), "%d", &child); err != nil || fmt.Sprint(child) != e.Name() {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// Fields after the command name, which is in parentheses and may
		// itself contain spaces or parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		var state string
		var ppid int
		if _, err := fmt.Sscanf(string(stat[i+1:]), " %s %d", &state, &ppid); err != nil {
			continue
		}
		if ppid == pid {
			out = append(out, child)
		}
	}
	return out, nil
}
