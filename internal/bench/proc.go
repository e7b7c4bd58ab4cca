package bench

import (
	"fmt"
	"time"

	"github.com/prometheus/procfs"
)

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

// childPIDs lists the processes whose parent is pid.
func childPIDs(pid int) ([]int, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("children of %d: %w", pid, err)
	}
	var out []int
	for _, p := range procs {
		if st, err := p.Stat(); err == nil && st.PPID == pid {
			out = append(out, p.PID)
		}
	}
	return out, nil
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
				if kids, err := childPIDs(pid); err == nil && len(kids) > 0 {
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
