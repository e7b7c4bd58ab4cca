package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prometheus/procfs"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/sdk/mmap"
	"github.com/wcache/wcache/test/testproc"
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
	m, err := mmap.FD(fd, uint64(st.Size), mmap.Read)
	if err != nil {
		return 0, 0, err
	}
	defer mmap.Unmap(m)
	vec := make([]byte, (st.Size+pageSize-1)/pageSize)
	if err := mmap.Mincore(m, vec); err != nil {
		return 0, 0, fmt.Errorf("mincore %s: %w", path, err)
	}
	for _, v := range vec {
		in += uint64(v & 1)
	}
	return in, uint64(len(vec)), nil
}

// ProcMemory is the memory of one process from /proc/<pid>/status, in
// bytes. RssShmem counts the shared-memory pages mapped into the process's
// page tables (a mock plugin that writes its arena through the file, not
// the mapping, shows little); NonShared is RssAnon + RssFile: its heap,
// stacks, binary and libraries.
type ProcMemory struct {
	RssAnon  uint64 `json:"rss_anon_bytes"`
	RssFile  uint64 `json:"rss_file_bytes"`
	RssShmem uint64 `json:"rss_shmem_bytes"`
	VmHWM    uint64 `json:"vm_hwm_bytes"`
}

func (m ProcMemory) NonShared() uint64 { return m.RssAnon + m.RssFile }

// max is the field-wise maximum of m and o.
func (m ProcMemory) max(o ProcMemory) ProcMemory {
	return ProcMemory{RssAnon: max(m.RssAnon, o.RssAnon), RssFile: max(m.RssFile, o.RssFile),
		RssShmem: max(m.RssShmem, o.RssShmem), VmHWM: max(m.VmHWM, o.VmHWM)}
}

// ReadProcMemory reads the memory of pid.
func ReadProcMemory(pid int) (ProcMemory, error) {
	p, err := procfs.NewProc(pid)
	if err == nil {
		var st procfs.ProcStatus
		if st, err = p.NewStatus(); err == nil {
			return ProcMemory{RssAnon: st.RssAnon, RssFile: st.RssFile, RssShmem: st.RssShmem, VmHWM: st.VmHWM}, nil
		}
	}
	return ProcMemory{}, fmt.Errorf("memory of pid %d: %w", pid, err)
}

// Faults are a process's page faults so far.
type Faults struct {
	Minor uint64 `json:"minor"`
	Major uint64 `json:"major"`
}

// ReadFaults reads the page-fault counters of pid.
func ReadFaults(pid int) (Faults, error) {
	p, err := procfs.NewProc(pid)
	if err == nil {
		var st procfs.ProcStat
		if st, err = p.Stat(); err == nil {
			return Faults{Minor: uint64(st.MinFlt), Major: uint64(st.MajFlt)}, nil
		}
	}
	return Faults{}, fmt.Errorf("faults of pid %d: %w", pid, err)
}

// Sampler polls the memory of a process and of its first child (the
// daemon's plugin, once it appears) at a fixed interval and keeps the peak
// of each field.
type Sampler struct {
	stop, done chan struct{}
	peaks      map[int]ProcMemory // written by the sampling goroutine until done
}

// NewSampler starts sampling pid every interval.
func NewSampler(interval time.Duration, pid int) *Sampler {
	s := &Sampler{stop: make(chan struct{}), done: make(chan struct{}), peaks: map[int]ProcMemory{}}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		child := 0
		sample := func() {
			if child == 0 {
				if kids, err := testproc.ChildPIDs(pid); err == nil && len(kids) > 0 {
					child = kids[0]
				}
			}
			for _, p := range []int{pid, child} {
				if m, err := ReadProcMemory(p); p != 0 && err == nil {
					s.peaks[p] = s.peaks[p].max(m)
				}
			}
		}
		for {
			sample()
			select {
			case <-s.stop:
				sample()
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends sampling (after one last sample) and returns the peak of every field per pid.
func (s *Sampler) Stop() map[int]ProcMemory {
	close(s.stop)
	<-s.done
	return s.peaks
}
