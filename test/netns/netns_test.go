package netns_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/test/netns"
	"github.com/wcache/wcache/test/testproc"
)

// TestPairCarriesTrafficBetweenHosts: a connection dialled from B reaches
// a listener in A from B's address, over the veth pair.
func TestPairCarriesTrafficBetweenHosts(t *testing.T) {
	p := netns.New(t)
	l, err := p.A.Listen("tcp", net.JoinHostPort(p.A.Addr.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	msg := []byte("across the veth pair")
	remote := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			remote <- err.Error()
			return
		}
		defer c.Close()
		remote <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		_, _ = c.Write(msg)
	}()
	c, err := p.B.DialContext(t.Context(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("read %q (%v), want %q", got, err, msg)
	}
	if r := <-remote; r != p.B.Addr.String() {
		t.Fatalf("A saw the connection from %s, want B's %s", r, p.B.Addr)
	}
}

// TestHostHasOnlyItsOwnLinks: a namespace holds loopback and its end of
// the pair, none of the machine's interfaces.
func TestHostHasOnlyItsOwnLinks(t *testing.T) {
	p := netns.New(t)
	for _, h := range []*netns.Host{p.A, p.B} {
		out, err := exec.Command("ip", "-n", h.Name, "-o", "link", "show").CombinedOutput()
		if err != nil {
			t.Fatalf("ip -n %s link: %v: %s", h.Name, err, out)
		}
		var names []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			if len(f) > 1 {
				names = append(names, strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0])
			}
		}
		if strings.Join(names, ",") != "lo,"+h.Link {
			t.Fatalf("links of %s: %v, want lo and %s", h.Name, names, h.Link)
		}
	}
}

// TestStartRunsTheProgramInTheHost: the process Start starts is the
// program itself (ip exec'd it), inside the namespace, and it outlives the
// threads that DialContext and Listen end (its parent-death signal is tied
// to the thread that forked it).
func TestStartRunsTheProgramInTheHost(t *testing.T) {
	p := netns.New(t)
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	sleepExe, err := filepath.EvalSymlinks(sleep) // what /proc/<pid>/exe names
	if err != nil {
		t.Fatal(err)
	}
	proc, err := p.A.Start(testproc.Options{Path: sleep, Args: []string{"600"}})
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// ip runs first under the same pid; wait for its exec of sleep.
	exe := ""
	if err := proc.WaitFor(ctx, "exec of sleep", 30*time.Second, func() bool {
		exe, _ = os.Readlink(filepath.Join("/proc", itoa(proc.PID()), "exe"))
		return filepath.Base(exe) == filepath.Base(sleepExe)
	}); err != nil {
		t.Fatalf("%v (exe %s)", err, exe)
	}
	if got, want := inode(t, filepath.Join("/proc", itoa(proc.PID()), "ns", "net")), inode(t, p.A.Path()); got != want {
		t.Fatalf("the process's network namespace is inode %d, A's is %d", got, want)
	}
	for range 32 {
		l, err := p.B.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
	if proc.Exited() {
		t.Fatalf("the process died when threads of the test ended:\n%s", proc)
	}
}

// TestCleanupDeletesThePair: once the test that made a pair ends, its
// namespaces are gone.
func TestCleanupDeletesThePair(t *testing.T) {
	var paths []string
	t.Run("make", func(t *testing.T) {
		p := netns.New(t)
		paths = []string{p.A.Path(), p.B.Path()}
	})
	if paths == nil {
		t.Skip("no pair was made")
	}
	for _, path := range paths {
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Errorf("%s after the test: %v, want gone", path, err)
		}
	}
}

// TestSweepLeftovers: a namespace named for a run that has ended is
// deleted; one named for a live run (this one) and one of another name
// are kept.
func TestSweepLeftovers(t *testing.T) {
	ip, err := netns.Available()
	if err != nil {
		t.Skipf("network namespace tests skipped: %v", err)
	}
	// A process that has ended: its pid and start time name a dead run.
	dead := childproc.ExitedPID(t)
	self := netns.New(t)      // a live run's pair
	names := map[string]bool{ // name → kept
		"wcache-test-" + itoa(dead) + ".1-00aa00aa-a":  false,
		"wcache-test-" + itoa(dead) + ".1-00aa00aa-b":  false,
		"wcache-testx-" + itoa(dead) + ".1-00aa00aa-a": true,
	}
	for name := range names {
		if out, err := exec.Command(ip, "netns", "add", name).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", name, err, out)
		}
		t.Cleanup(func() { _ = exec.Command(ip, "netns", "delete", name).Run() })
	}
	if err := netns.SweepLeftovers(ip); err != nil {
		t.Fatal(err)
	}
	names[filepath.Base(self.A.Path())] = true
	names[filepath.Base(self.B.Path())] = true
	for name, kept := range names {
		_, err := os.Lstat(filepath.Join("/run/netns", name))
		if kept != (err == nil) {
			t.Errorf("%s: present %v, want %v", name, err == nil, kept)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
