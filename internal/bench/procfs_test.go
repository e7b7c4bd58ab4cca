package bench

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

const sampleStatus = `Name:	wcache
VmPeak:	 1263828 kB
VmHWM:	   16072 kB
VmRSS:	   16072 kB
RssAnon:	    3380 kB
RssFile:	   12692 kB
RssShmem:	       4 kB
Threads:	9
`

func TestParseProcStatus(t *testing.T) {
	m, err := parseProcStatus(sampleStatus)
	if err != nil {
		t.Fatal(err)
	}
	want := ProcMemory{RssAnon: 3380 << 10, RssFile: 12692 << 10, RssShmem: 4 << 10, VmHWM: 16072 << 10}
	if m != want {
		t.Fatalf("parseProcStatus = %+v, want %+v", m, want)
	}
	if m.NonShared() != (3380+12692)<<10 {
		t.Errorf("NonShared = %d", m.NonShared())
	}
	if _, err := parseProcStatus("Name:\tzombie\nState:\tZ\n"); !errors.Is(err, errNoMemoryFields) {
		t.Errorf("status without RSS fields: err = %v, want errNoMemoryFields", err)
	}
}

func TestParseStatFieldsAndFaults(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "1234 (a (weird) name) S 1 1234 1234 0 -1 4194560 777 0 5 0 1 2 0 0 20 0 9 0 100 0 0"
	f, err := parseStatFields(line, 1234)
	if err != nil {
		t.Fatal(err)
	}
	if f[1] != "1" {
		t.Errorf("ppid field = %q, want 1", f[1])
	}
	fl, err := faultsOf(f, 1234)
	if err != nil {
		t.Fatal(err)
	}
	if fl != (Faults{Minor: 777, Major: 5}) {
		t.Errorf("faults = %+v, want minor 777 major 5", fl)
	}
	if _, err := parseStatFields("1234 no-parens", 1234); err == nil {
		t.Error("malformed stat line accepted")
	}
}

func TestChildPIDsAndSampler(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	kids, err := ChildPIDs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, k := range kids {
		found = found || k == cmd.Process.Pid
	}
	if !found {
		t.Fatalf("ChildPIDs(self) = %v, missing %d", kids, cmd.Process.Pid)
	}
	s := NewSampler(time.Millisecond, func() []int { return []int{cmd.Process.Pid} }, os.Getpid())
	time.Sleep(20 * time.Millisecond)
	peaks, n := s.Stop()
	if n == 0 {
		t.Fatal("no samples")
	}
	if peaks[os.Getpid()].RssAnon == 0 || peaks[cmd.Process.Pid].RssFile == 0 {
		t.Errorf("peaks = %+v: want memory of both the test and the discovered child", peaks)
	}
	if f, err := ReadFaults(os.Getpid()); err != nil || f.Minor == 0 {
		t.Errorf("ReadFaults(self) = %+v, %v", f, err)
	}
}
