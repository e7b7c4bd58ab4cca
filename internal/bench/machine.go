package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"

	"github.com/prometheus/procfs"
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
	// Load1 is the one-minute load average when the run began: above
	// Cores, other work shared the machine.
	Load1 float64 `json:"load1"`
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
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if cpus, err := fs.CPUInfo(); err == nil && len(cpus) > 0 {
			m.CPUModel, m.Virtualized = cpus[0].ModelName, slices.Contains(cpus[0].Flags, "hypervisor")
		}
		if mi, err := fs.Meminfo(); err == nil && mi.MemTotalBytes != nil {
			m.MemoryBytes = *mi.MemTotalBytes
		}
		if la, err := fs.LoadAvg(); err == nil {
			m.Load1 = la.Load1
		}
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		m.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) +
			" " + unix.ByteSliceToString(u.Machine[:])
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
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

// ReadCommit asks git in dir for HEAD and whether the tree has changes
// (tracked or untracked files).
func ReadCommit(ctx context.Context, dir string) (Commit, error) {
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
	st, err := git("status", "--porcelain", "--", ".")
	if err != nil {
		return Commit{}, err
	}
	return Commit{Hash: hash, Dirty: st != ""}, nil
}
