package testproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Measurements of child processes for the benchmarks: memory, page
// faults, the peak memory during a start, and the shared memory a world's
// mock backend holds.

// Memory is the memory of one process from /proc/<pid>/status, in
// bytes. RssShmem counts the shared-memory pages mapped into the process's
// page tables (a mock plugin that writes its arena through the file, not
// the mapping, shows little); NonShared is RssAnon + RssFile: its heap,
// stacks, binary and libraries.
type Memory struct {
	RssAnon  uint64 `json:"rss_anon_bytes"`
	RssFile  uint64 `json:"rss_file_bytes"`
	RssShmem uint64 `json:"rss_shmem_bytes"`
	VmHWM    uint64 `json:"vm_hwm_bytes"`
}

func (m Memory) NonShared() uint64 { return m.RssAnon + m.RssFile }

// Max is the field-wise maximum of m and o.
func (m Memory) Max(o Memory) Memory {
	return Memory{RssAnon: max(m.RssAnon, o.RssAnon), RssFile: max(m.RssFile, o.RssFile),
		RssShmem: max(m.RssShmem, o.RssShmem), VmHWM: max(m.VmHWM, o.VmHWM)}
}

// ReadMemory reads the memory of pid.
func ReadMemory(pid int) (Memory, error) {
	p, err := procfs.NewProc(pid)
	if err == nil {
		var st procfs.ProcStatus
		if st, err = p.NewStatus(); err == nil {
			return Memory{RssAnon: st.RssAnon, RssFile: st.RssFile, RssShmem: st.RssShmem, VmHWM: st.VmHWM}, nil
		}
	}
	return Memory{}, fmt.Errorf("memory of pid %d: %w", pid, err)
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

// IO are a process's I/O counters so far (/proc/<pid>/io): RChar is what
// it read through read-family system calls (files, sockets, pipes; the
// page cache included, unlike read_bytes, which counts only what came from
// storage), WChar what it wrote through write-family calls.
type IO struct {
	RChar, WChar uint64
}

// ReadIO reads the I/O counters of pid.
func ReadIO(pid int) (IO, error) {
	p, err := procfs.NewProc(pid)
	if err == nil {
		var io procfs.ProcIO
		if io, err = p.IO(); err == nil {
			return IO{RChar: io.RChar, WChar: io.WChar}, nil
		}
	}
	return IO{}, fmt.Errorf("I/O counters of pid %d: %w", pid, err)
}

// Sampler polls the memory of a process and of its first child (the
// daemon's plugin, once it appears) at a fixed interval and keeps the peak
// of each field.
type Sampler struct {
	stop, done chan struct{}
	peaks      map[int]Memory // written by the sampling goroutine until done
}

// NewSampler starts sampling pid every interval.
func NewSampler(interval time.Duration, pid int) *Sampler {
	s := &Sampler{stop: make(chan struct{}), done: make(chan struct{}), peaks: map[int]Memory{}}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for child, last := 0, false; ; {
			if child == 0 {
				if kids, err := ChildPIDs(pid); err == nil && len(kids) > 0 {
					child = kids[0]
				}
			}
			for _, p := range []int{pid, child} {
				if m, err := ReadMemory(p); p != 0 && err == nil {
					s.peaks[p] = s.peaks[p].Max(m)
				}
			}
			if last {
				return
			}
			select {
			case <-s.stop:
				last = true // one last sample
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends sampling and returns the peak of every field per pid.
func (s *Sampler) Stop() map[int]Memory {
	close(s.stop)
	<-s.done
	return s.peaks
}

// ShmAllocated is the memory held by the mock's allocations: the files of
// the world's shared-memory folder (posix-shm handles) and the memfds that
// the processes pids hold open (memfd handles, each inode once), by their
// allocated blocks (a sparse file counts only the pages written).
func (w *World) ShmAllocated(pids ...int) (uint64, error) {
	var total uint64
	seen := map[[2]uint64]bool{} // device and inode
	count := func(path string, stat func(string, *unix.Stat_t) error) error {
		var st unix.Stat_t
		if err := stat(path, &st); err != nil || seen[[2]uint64{st.Dev, st.Ino}] || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return err
		}
		seen[[2]uint64{st.Dev, st.Ino}], total = true, total+uint64(st.Blocks)*512
		return nil
	}
	for _, pid := range pids {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			return 0, fmt.Errorf("memfds of pid %d: %w", pid, err)
		}
		for _, fd := range fds {
			link := fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())
			if target, err := os.Readlink(link); err == nil && strings.HasPrefix(target, "/memfd:") {
				_ = count(link, unix.Stat) // a descriptor closed meanwhile counts nothing
			}
		}
	}
	entries, err := os.ReadDir(w.MockDir)
	if err != nil {
		return 0, fmt.Errorf("shared-memory files: %w", err)
	}
	for _, e := range entries {
		if err := count(filepath.Join(w.MockDir, e.Name()), unix.Lstat); err != nil && !errors.Is(err, unix.ENOENT) {
			return 0, fmt.Errorf("shared-memory files: %w", err)
		}
	}
	return total, nil
}
