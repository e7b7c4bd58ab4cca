package bench

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// serveRun is one `wcache serve` from fork/exec to ready, then stopped.
type serveRun struct {
	// StartToReady is fork/exec until the ready file named the process.
	StartToReady time.Duration
	// Load is the daemon's own load time (the Backend.Load calls) as serve
	// reports it, and LoadBytes what it loaded.
	Load      time.Duration
	LoadBytes uint64
	// Phases are approximate (millisecond log timestamps) durations of
	// the start-up from the daemon's debug log; absent when a line is missing.
	Phases map[string]time.Duration
	// Peak is the peak of each memory field from start to ready, sampled;
	// Steady is the memory once ready. Keys: "daemon", "plugin".
	Peak, Steady map[string]ProcMemory
	Samples      int
	// PluginFaults are the plugin's page faults from its start to ready.
	PluginFaults Faults
	// ShmFiles is the memory held by the mock's shared-memory files once
	// ready (allocated blocks): where the cached weights are.
	ShmFiles uint64
	// Resident is the fraction of the checkpoint's pages in the page cache
	// just before the start (after dropping caches for a cold run).
	Resident float64
}

// memorySampleInterval is how often memory is sampled during a load.
const memorySampleInterval = 5 * time.Millisecond

// serveOnce starts serve on model in a world of its own, waits until it is
// ready, measures and stops it. With cold the page cache is dropped first
// (an error when that is impossible).
func serveOnce(ctx context.Context, o Options, name string, m *Model, cold bool) (serveRun, error) {
	w, err := newWorld(o, name, m.Bytes+m.Bytes/8+(64<<20))
	if err != nil {
		return serveRun{}, err
	}
	defer w.Close()
	if cold {
		if err := dropCaches(); err != nil {
			return serveRun{}, err
		}
	}
	run := serveRun{Resident: residentFraction(m.Files)}
	var sampler *Sampler
	d, err := w.startServe(ctx, m.Dir, true, func(pid int) {
		sampler = NewSampler(memorySampleInterval, func() []int {
			kids, _ := ChildPIDs(pid)
			return kids
		}, pid)
	}, "--log-level", "debug")
	if err != nil {
		if sampler != nil {
			sampler.Stop()
		}
		return serveRun{}, err
	}
	peaks, n := sampler.Stop()
	defer d.Stop()
	run.StartToReady = d.ReadyAt.Sub(d.Started)
	run.Samples = n
	pluginPID, err := d.PluginPID()
	if err != nil {
		return serveRun{}, err
	}
	run.Peak = map[string]ProcMemory{"daemon": peaks[d.PID()], "plugin": peaks[pluginPID]}
	if run.PluginFaults, err = ReadFaults(pluginPID); err != nil {
		return serveRun{}, err
	}
	if run.ShmFiles, err = w.ShmAllocated(); err != nil {
		return serveRun{}, err
	}
	run.Steady = map[string]ProcMemory{}
	for role, pid := range map[string]int{"daemon": d.PID(), "plugin": pluginPID} {
		if run.Steady[role], err = ReadProcMemory(pid); err != nil {
			return serveRun{}, err
		}
	}
	// serve prints its "loaded in" line just after writing the ready file.
	out, err := d.waitOutput(loadLine)
	if err != nil {
		return serveRun{}, err
	}
	if run.Load, err = parseLoadTime(out); err != nil {
		return serveRun{}, err
	}
	run.LoadBytes = m.Bytes
	run.Phases = parsePhases(out, d.Started, d.ReadyAt, run.Load)
	if err := d.Stop(); err != nil {
		return serveRun{}, err
	}
	return run, nil
}

// loadLine matches serve's stdout line "… loaded in 1.234s (3.2 GiB/s)".
var loadLine = regexp.MustCompile(`loaded in ([0-9.]+[a-zµ]+) \(`)

// parseLoadTime finds the daemon's load time in serve's output.
func parseLoadTime(out string) (time.Duration, error) {
	m := loadLine.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no \"loaded in …\" line in wcache serve's output:\n%s", tail(out, 2000))
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		return 0, fmt.Errorf("load time %q: %w", m[1], err)
	}
	return d, nil
}

// Start-up phases read from serve's debug log.
const (
	phaseProcess = "process start to first log line"
	phasePlugin  = "backend plugin start"
	phasePrepare = "UUID, headers, plan, digest, lock"
	phaseLoad    = "load (daemon-reported)"
	phaseRest    = "allocate, export, listen, ready file"
)

// phaseOrder is the order phases are shown in.
func phaseOrder() []string {
	return []string{phaseProcess, phasePlugin, phasePrepare, phaseLoad, phaseRest}
}

// logTime is the timestamp at the start of an hclog line.
func logTime(line string) (time.Time, bool) {
	ts, _, ok := strings.Cut(line, " ")
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse("2006-01-02T15:04:05.000Z0700", ts)
	return t, err == nil
}

// parsePhases splits start→ready using the log lines "backend plugin
// started" and "identity lock" (the lock is taken after planning, right
// before allocation and load). Missing lines leave phases out.
func parsePhases(out string, started, ready time.Time, load time.Duration) map[string]time.Duration {
	var first, plugin, lock time.Time
	for line := range strings.SplitSeq(out, "\n") {
		t, ok := logTime(line)
		if !ok {
			continue
		}
		switch {
		case first.IsZero():
			first = t
		}
		switch {
		case plugin.IsZero() && strings.Contains(line, "backend plugin started"):
			plugin = t
		case lock.IsZero() && strings.Contains(line, "identity lock"):
			lock = t
		}
	}
	p := map[string]time.Duration{phaseLoad: load}
	if first.IsZero() {
		return p
	}
	p[phaseProcess] = max(first.Sub(started), 0)
	if plugin.IsZero() {
		return p
	}
	p[phasePlugin] = plugin.Sub(first)
	if lock.IsZero() {
		return p
	}
	p[phasePrepare] = lock.Sub(plugin)
	p[phaseRest] = max(ready.Sub(lock)-load, 0)
	return p
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
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, 0, err
	}
	if st.Size == 0 {
		return 0, 0, nil
	}
	m, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Munmap(m)
	page := uint64(unix.Getpagesize())
	vec := make([]byte, (uint64(st.Size)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)),
		uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return 0, 0, fmt.Errorf("mincore %s: %w", path, errno)
	}
	for _, v := range vec {
		in += uint64(v & 1)
	}
	return in, uint64(len(vec)), nil
}
