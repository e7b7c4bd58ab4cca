package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine describes where the benchmark ran.
type Machine struct {
	CPUModel    string `json:"cpu_model"`
	Cores       int    `json:"cores"`
	MemoryBytes uint64 `json:"memory_bytes"`
	Kernel      string `json:"kernel"`
	OS          string `json:"os"`
	GoVersion   string `json:"go_version"`
	// Python is the interpreter the Python scenarios ran, with the
	// versions of numpy and torch it imported ("" when not run).
	Python string `json:"python,omitempty"`
	// Virtualized is the hypervisor flag of /proc/cpuinfo: page-cache
	// "cold" reads may then still be served by the host's cache.
	Virtualized bool `json:"virtualized"`
	// ShmemTHP is the kernel's transparent-huge-page mode for shared
	// memory (the bracketed word of
	// /sys/kernel/mm/transparent_hugepage/shmem_enabled; "" when
	// unreadable): with "never", tmpfs hands out 4 KiB pages one at a time.
	ShmemTHP string `json:"shmem_thp,omitempty"`
}

// Commit is the source the benchmark was built from.
type Commit struct {
	Hash  string `json:"hash"`
	Dirty bool   `json:"dirty"`
}

// ReadMachine describes this machine from /proc and uname. Fields it cannot
// read are left empty rather than failing the run.
func ReadMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPUModel, m.Virtualized = parseCPUInfo(b)
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.MemoryBytes = parseMemTotal(b)
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		m.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) +
			" " + unix.ByteSliceToString(u.Machine[:])
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		m.OS = osPrettyName(b)
	}
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/shmem_enabled"); err == nil {
		m.ShmemTHP = selectedMode(string(b))
	}
	return m
}

// selectedMode is the bracketed choice of a sysfs mode list such as
// "always within_size advise [never] deny force" ("" when none is).
func selectedMode(s string) string {
	for _, f := range strings.Fields(s) {
		if len(f) > 2 && f[0] == '[' && f[len(f)-1] == ']' {
			return f[1 : len(f)-1]
		}
	}
	return ""
}

// parseCPUInfo returns the first "model name" and whether the "hypervisor"
// flag is set.
func parseCPUInfo(b []byte) (model string, virtualized bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "model name":
			if model == "" {
				model = v
			}
		case "flags":
			if !virtualized {
				virtualized = strings.Contains(" "+v+" ", " hypervisor ")
			}
		}
	}
	return model, virtualized
}

// parseMemTotal returns MemTotal of /proc/meminfo in bytes (0 when absent).
func parseMemTotal(b []byte) uint64 {
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			return parseKB(rest)
		}
	}
	return 0
}

// parseKB parses " 1234 kB" into bytes (0 when malformed).
func parseKB(s string) uint64 {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0
	}
	n, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return 0
	}
	if len(f) > 1 && f[1] == "kB" {
		n *= 1024
	}
	return n
}

// osPrettyName is PRETTY_NAME of /etc/os-release.
func osPrettyName(b []byte) string {
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// ReadCommit asks git in dir for HEAD and whether the tree has changes
// (tracked or untracked files) other than the paths in exclude (the
// reports being rewritten; absolute, or relative to the working directory).
func ReadCommit(ctx context.Context, dir string, exclude ...string) (Commit, error) {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s in %s: %w", strings.Join(args, " "), dir, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	hash, err := git("rev-parse", "HEAD")
	if err != nil {
		return Commit{}, err
	}
	args := []string{"status", "--porcelain", "--", "."}
	for _, p := range exclude {
		if rel, ok := relativeTo(dir, p); ok {
			args = append(args, ":(exclude)"+rel)
		}
	}
	st, err := git(args...)
	if err != nil {
		return Commit{}, err
	}
	return Commit{Hash: hash, Dirty: st != ""}, nil
}

// relativeTo is path relative to dir, when it lies inside it.
func relativeTo(dir, path string) (string, bool) {
	ad, err1 := filepath.Abs(dir)
	ap, err2 := filepath.Abs(path)
	if err1 != nil || err2 != nil {
		return "", false
	}
	rel, err := filepath.Rel(ad, ap)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return filepath.ToSlash(rel), true
}
