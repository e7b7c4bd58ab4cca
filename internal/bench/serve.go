package bench

import (
	"context"
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/core/client"
)

// serveRun is one `wcache serve` from fork/exec to ready, then stopped.
type serveRun struct {
	// StartToReady is fork/exec until the ready file named the process.
	StartToReady time.Duration
	// Phases are the daemon's own timings of its start (Status).
	Phases client.StartPhases
	// Peak is the sampled peak of each memory field from start to ready;
	// Steady the memory once ready. Keys: "daemon", "plugin".
	Peak, Steady map[string]ProcMemory
	// PluginFaults are the plugin's page faults from its start to ready.
	PluginFaults Faults
	// ShmFiles is the memory held by the mock's allocations once ready
	// (allocated blocks of its files or memfds): where the cached weights
	// are.
	ShmFiles uint64
	// Resident is the fraction of the checkpoint's pages in the page cache
	// just before the start (after dropping caches for a cold run).
	Resident float64
}

// memorySampleInterval is how often memory is sampled during a load.
const memorySampleInterval = 5 * time.Millisecond

// serveOnce starts serve on m in a world of its own, waits until it is
// ready, measures and stops it. With cold the page cache is dropped first
// (an error when that is impossible).
func serveOnce(ctx context.Context, o Options, name string, m *Model, cold bool) (run serveRun, err error) {
	w, err := newWorld(o, name, m)
	if err != nil {
		return run, err
	}
	defer w.Close()
	if cold {
		if err := dropCaches(); err != nil {
			return run, err
		}
	}
	run.Resident = residentFraction(m.Files)
	var sampler *Sampler
	d, err := w.startServe(ctx, func(pid int) { sampler = NewSampler(memorySampleInterval, pid) }, "--model", m.Dir)
	var peaks map[int]ProcMemory
	if sampler != nil {
		peaks = sampler.Stop()
	}
	if err != nil {
		return run, err
	}
	run.StartToReady = d.StartToReady
	pluginPID, err := d.PluginPID()
	if err != nil {
		return run, err
	}
	if run.PluginFaults, err = ReadFaults(pluginPID); err != nil {
		return run, err
	}
	if run.ShmFiles, err = w.ShmAllocated(d.PID(), pluginPID); err != nil {
		return run, err
	}
	run.Peak, run.Steady = map[string]ProcMemory{}, map[string]ProcMemory{}
	for role, pid := range map[string]int{"daemon": d.PID(), "plugin": pluginPID} {
		run.Peak[role] = peaks[pid]
		if run.Steady[role], err = ReadProcMemory(pid); err != nil {
			return run, err
		}
	}
	if run.Phases, err = w.loaded(ctx, d, m); err != nil {
		return run, err
	}
	return run, d.Stop()
}

// dropCaches writes back dirty pages and drops the page cache (root only).
func dropCaches() error {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
		return fmt.Errorf("drop the page cache: %w", err)
	}
	return nil
}

// residentFraction is the share of the files' pages in the page cache
// (mincore), or -1 when it cannot be measured.
func residentFraction(files []string) float64 {
	var in, all uint64
	for _, f := range files {
		i, n, err := residentPages(f)
		if err != nil {
			return -1
		}
		in, all = in+i, all+n
	}
	if all == 0 {
		return -1
	}
	return round3(float64(in) / float64(all))
}

// residentPages counts the pages of path in the page cache.
func residentPages(path string) (in, all uint64, err error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size == 0 {
		return 0, 0, err
	}
	m, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Munmap(m)
	vec := make([]byte, (st.Size+pageSize-1)/pageSize)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)),
		uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return 0, 0, fmt.Errorf("mincore %s: %w", path, errno)
	}
	for _, v := range vec {
		in += uint64(v & 1)
	}
	return in, uint64(len(vec)), nil
}
