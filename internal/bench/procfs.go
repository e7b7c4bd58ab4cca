package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ProcMemory is the memory of one process from /proc/<pid>/status, in
// bytes. RSS = RssAnon + RssFile + RssShmem; RssShmem counts the shared
// memory pages mapped into the process's page tables (a mock plugin that
// writes its arena through the file, not the mapping, shows little).
type ProcMemory struct {
	RssAnon  uint64 `json:"rss_anon_bytes"`
	RssFile  uint64 `json:"rss_file_bytes"`
	RssShmem uint64 `json:"rss_shmem_bytes"`
	VmHWM    uint64 `json:"vm_hwm_bytes"`
}

// NonShared is RssAnon + RssFile: what the process holds besides shared
// memory (its heap, stacks, binary and libraries).
func (m ProcMemory) NonShared() uint64 { return m.RssAnon + m.RssFile }

// ReadProcMemory reads /proc/<pid>/status.
func ReadProcMemory(pid int) (ProcMemory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcMemory{}, fmt.Errorf("memory of pid %d: %w", pid, err)
	}
	return parseProcStatus(string(b))
}

// errNoMemoryFields: a status file without RSS fields (a zombie, or a
// kernel older than 4.5).
var errNoMemoryFields = errors.New("no RssAnon/RssFile/RssShmem in /proc status")

func parseProcStatus(s string) (ProcMemory, error) {
	var m ProcMemory
	found := 0
	for line := range strings.SplitSeq(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "RssAnon":
			m.RssAnon, found = parseKB(v), found+1
		case "RssFile":
			m.RssFile, found = parseKB(v), found+1
		case "RssShmem":
			m.RssShmem, found = parseKB(v), found+1
		case "VmHWM":
			m.VmHWM = parseKB(v)
		}
	}
	if found < 3 {
		return m, errNoMemoryFields
	}
	return m, nil
}

// ChildPIDs lists the direct children of pid (from /proc/<pid>/task/*/children,
// else by scanning every /proc/<n>/stat for its parent).
func ChildPIDs(pid int) ([]int, error) {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if len(tasks) > 0 {
		var out []int
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			for f := range strings.FieldsSeq(string(b)) {
				if n, err := strconv.Atoi(f); err == nil {
					out = append(out, n)
				}
			}
		}
		return out, nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("children of %d: %w", pid, err)
	}
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, err := parentPID(n); err == nil && ppid == pid {
			out = append(out, n)
		}
	}
	return out, nil
}

// parentPID is field 4 of /proc/<pid>/stat.
func parentPID(pid int) (int, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[1])
}

// statFields are the fields of /proc/<pid>/stat after the command name:
// index 0 is field 3 (state).
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	return parseStatFields(string(b), pid)
}

func parseStatFields(s string, pid int) ([]string, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 10 {
		return nil, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return f, nil
}

// Faults are a process's page faults so far (/proc/<pid>/stat fields 10
// and 12: minflt, majflt).
type Faults struct {
	Minor, Major uint64
}

// ReadFaults reads the page-fault counters of pid.
func ReadFaults(pid int) (Faults, error) {
	f, err := statFields(pid)
	if err != nil {
		return Faults{}, fmt.Errorf("faults of pid %d: %w", pid, err)
	}
	return faultsOf(f, pid)
}

func faultsOf(f []string, pid int) (Faults, error) {
	minor, err1 := strconv.ParseUint(f[7], 10, 64)
	major, err2 := strconv.ParseUint(f[9], 10, 64)
	if err1 != nil || err2 != nil {
		return Faults{}, fmt.Errorf("malformed fault counters in /proc/%d/stat", pid)
	}
	return Faults{Minor: minor, Major: major}, nil
}

// Sampler polls the memory of processes at a fixed interval and keeps the
// peak of each field. Use Add to follow a process found later (the plugin
// appears after the daemon starts).
type Sampler struct {
	interval time.Duration
	discover func() []int
	stop     chan struct{}
	done     chan struct{}

	mu    sync.Mutex
	pids  []int
	peaks map[int]ProcMemory
	n     int
}

// NewSampler starts sampling pids every interval. discover, when not nil,
// is called before each round and every pid it returns is followed too
// (e.g. the children of a daemon, as they appear).
func NewSampler(interval time.Duration, discover func() []int, pids ...int) *Sampler {
	s := &Sampler{interval: interval, discover: discover, stop: make(chan struct{}), done: make(chan struct{}),
		pids: pids, peaks: map[int]ProcMemory{}}
	go s.run()
	return s
}

// Add follows pid as well.
func (s *Sampler) Add(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pids {
		if p == pid {
			return
		}
	}
	s.pids = append(s.pids, pid)
}

func (s *Sampler) run() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-s.stop:
			s.sample()
			return
		case <-t.C:
		}
	}
}

func (s *Sampler) sample() {
	if s.discover != nil {
		for _, pid := range s.discover() {
			s.Add(pid)
		}
	}
	s.mu.Lock()
	pids := append([]int(nil), s.pids...)
	s.mu.Unlock()
	for _, pid := range pids {
		m, err := ReadProcMemory(pid)
		if err != nil {
			continue
		}
		s.mu.Lock()
		p := s.peaks[pid]
		p.RssAnon, p.RssFile = max(p.RssAnon, m.RssAnon), max(p.RssFile, m.RssFile)
		p.RssShmem, p.VmHWM = max(p.RssShmem, m.RssShmem), max(p.VmHWM, m.VmHWM)
		s.peaks[pid] = p
		s.n++
		s.mu.Unlock()
	}
}

// Stop ends sampling (after one last sample) and returns the peak of every
// field per pid, and how many samples were taken.
func (s *Sampler) Stop() (map[int]ProcMemory, int) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peaks, s.n
}
