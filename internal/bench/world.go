package bench

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/core/paths"
)

// world is one scenario's private environment: a short temporary root
// holding XDG_RUNTIME_DIR (so sockets and ready files are private), a
// shared-memory folder for the mock backend, and a device UUID of its own.
// Every process the scenario starts gets Env().
type world struct {
	o          Options
	Root       string
	RuntimeDir string
	MockDir    string
	UUID       string
	Paths      paths.Paths
	Layout     paths.Layout
	// Backend is what `wcache serve` runs ("": the mock); Setenv adds to
	// the environment of every process started afterwards.
	Backend string
	env     map[string]string
}

// backend is the --backend of the world's daemons.
func (w *world) backend() string {
	if w.Backend == "" {
		return "mock"
	}
	return w.Backend
}

// Setenv sets key for every process the world starts from now on.
func (w *world) Setenv(key, value string) { w.env[key] = value }

// newWorld creates the directories of a world named name; the mock
// backend's device holds mockMemory bytes.
func newWorld(o Options, name string, mockMemory uint64) (w *world, err error) {
	// A short root: Unix socket paths are limited to 107 bytes.
	root, err := os.MkdirTemp("", "wcb-")
	if err != nil {
		return nil, fmt.Errorf("world %s: %w", name, err)
	}
	w = &world{o: o, Root: root, RuntimeDir: filepath.Join(root, "run")}
	defer func() {
		if err != nil {
			_ = w.Close()
		}
	}()
	if err := os.Mkdir(w.RuntimeDir, 0o700); err != nil {
		return nil, fmt.Errorf("world %s: %w", name, err)
	}
	if w.MockDir, err = os.MkdirTemp(o.ShmDir, "wcache-bench-"+name+"-"); err != nil {
		return nil, fmt.Errorf("world %s: shared-memory folder: %w", name, err)
	}
	var b [10]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("world %s: %w", name, err)
	}
	h := hex.EncodeToString(b[:])
	w.UUID = fmt.Sprintf("GPU-%s-0000-4000-8000-%s", h[:8], h[8:20])
	bin, err := filepath.Abs(o.BinDir)
	if err != nil {
		return nil, err
	}
	w.env = map[string]string{
		"XDG_RUNTIME_DIR":     w.RuntimeDir,
		"WCACHE_MOCK_DIR":     w.MockDir,
		"WCACHE_MOCK_DEVICES": w.UUID,
		"WCACHE_MOCK_MEMORY":  strconv.FormatUint(max(mockMemory, 1<<20), 10),
		"WCACHE_PLUGIN_DIR":   bin,
	}
	if w.Layout, err = paths.NewLayout(paths.Options{Getenv: w.getenv}); err != nil {
		return nil, fmt.Errorf("world %s: %w", name, err)
	}
	if w.Paths, err = w.Layout.For(w.UUID); err != nil {
		return nil, fmt.Errorf("world %s: %w", name, err)
	}
	return w, nil
}

// getenv is the world's environment as a lookup function.
func (w *world) getenv(key string) string {
	if v, ok := w.env[key]; ok {
		return v
	}
	if strings.HasPrefix(key, "WCACHE_") || key == "XDG_RUNTIME_DIR" {
		return ""
	}
	return os.Getenv(key)
}

// Env is the environment of every process of the world: this process's,
// minus wcache variables that could leak in, plus the world's own.
func (w *world) Env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "WCACHE_") || k == "XDG_RUNTIME_DIR" || k == "CUDA_VISIBLE_DEVICES" {
			continue
		}
		out = append(out, kv)
	}
	for k, v := range w.env {
		out = append(out, k+"="+v)
	}
	return append(out, extra...)
}

// ShmAllocated is the memory held by the mock's allocations: the files of
// the world's shared-memory folder (posix-shm handles) and the memfds that
// the processes pids hold open (memfd handles, each inode once), by their
// allocated blocks (a sparse file counts only the pages written).
func (w *world) ShmAllocated(pids ...int) (uint64, error) {
	entries, err := os.ReadDir(w.MockDir)
	if err != nil {
		return 0, fmt.Errorf("shared-memory files: %w", err)
	}
	var total uint64
	seen := map[uint64]bool{}
	for _, pid := range pids {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			return 0, fmt.Errorf("memfds of pid %d: %w", pid, err)
		}
		for _, fd := range fds {
			link := fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())
			target, err := os.Readlink(link)
			if err != nil || !strings.HasPrefix(target, "/memfd:") {
				continue
			}
			var st unix.Stat_t
			if err := unix.Stat(link, &st); err != nil || seen[st.Ino] {
				continue
			}
			seen[st.Ino] = true
			total += uint64(st.Blocks) * 512
		}
	}
	for _, e := range entries {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(w.MockDir, e.Name()), &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return 0, fmt.Errorf("shared-memory files: %w", err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			total += uint64(st.Blocks) * 512
		}
	}
	return total, nil
}

// Close removes the world's directories (shared memory included).
func (w *world) Close() error {
	var errs []error
	if w.MockDir != "" {
		if err := os.RemoveAll(w.MockDir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(w.Root); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
