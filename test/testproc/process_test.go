package testproc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/daemonfile"
)

func TestStartCollectsOutputAndExitCode(t *testing.T) {
	g := NewGroup(Options{Path: "/bin/sh"})
	p, err := g.Start(Options{Args: []string{"-c", "echo out; echo err >&2; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if code, ok := p.Wait(10 * time.Second); !ok || code != 3 {
		t.Fatalf("exit %d (done %v), want 3", code, ok)
	}
	if p.Stdout() != "out\n" || p.Stderr() != "err\n" || !strings.Contains(p.Output(), "out\n") ||
		!strings.Contains(p.Output(), "err\n") {
		t.Fatalf("stdout %q stderr %q output %q", p.Stdout(), p.Stderr(), p.Output())
	}
	if !strings.Contains(p.String(), "sh -c") {
		t.Fatalf("String() does not name the command: %s", p)
	}
}

func TestRunReportsCodeAndTimeout(t *testing.T) {
	g := NewGroup(Options{Path: "/bin/sh"})
	res, err := g.Run(10*time.Second, Options{Args: []string{"-c", "echo hi; exit 4"}})
	if err != nil || res.Code != 4 || res.Stdout != "hi\n" {
		t.Fatalf("Run: %+v, %v; want exit 4 and hi", res, err)
	}
	if _, err := g.Run(200*time.Millisecond, Options{Args: []string{"-c", "exec sleep 30"}}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Run past its timeout: %v, want ErrTimeout", err)
	}
}

func TestWaitReadyAndOutput(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "x.ready")
	p, err := Start(Options{Path: "/bin/sh", Args: []string{"-c", "echo starting; sleep 30"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if err := p.WaitOutput(context.Background(), "starting", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// A ready file naming another process does not count.
	if err := daemonfile.WriteReady(ready, daemonfile.Ready{PID: os.Getpid(), DeviceUUID: "GPU-x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitReady(context.Background(), ready, 200*time.Millisecond); err == nil ||
		!strings.Contains(err.Error(), "not there after") {
		t.Fatalf("ready file of another pid: %v, want a timeout", err)
	}
	if err := daemonfile.WriteReady(ready, daemonfile.Ready{PID: p.PID(), DeviceUUID: "GPU-x"}); err != nil {
		t.Fatal(err)
	}
	r, err := p.WaitReady(context.Background(), ready, 10*time.Second)
	if err != nil || r.DeviceUUID != "GPU-x" {
		t.Fatalf("WaitReady: %+v, %v", r, err)
	}
}

func TestWaitFailsWhenTheProcessExits(t *testing.T) {
	p, err := Start(Options{Path: "/bin/sh", Args: []string{"-c", "echo bye; exit 1"}})
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitOutput(context.Background(), "never", 10*time.Second)
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "bye") {
		t.Fatalf("wait on an exited process: %v, want ErrExited with its output", err)
	}
}

func TestStopAllTermsThenKills(t *testing.T) {
	g := NewGroup(Options{Path: "/bin/sh"})
	polite, err := g.Start(Options{Args: []string{"-c", "exec sleep 30"}})
	if err != nil {
		t.Fatal(err)
	}
	stubborn, err := g.Start(Options{Args: []string{"-c", "trap '' TERM; echo armed; sleep 30 & wait"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := stubborn.WaitOutput(context.Background(), "armed", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	killed := g.StopAll(300 * time.Millisecond)
	if len(killed) != 1 || killed[0] != stubborn {
		t.Fatalf("killed %d processes, want only the one ignoring SIGTERM", len(killed))
	}
	if !polite.Exited() || !stubborn.Exited() {
		t.Fatal("a process survived StopAll")
	}
	if len(g.Processes()) != 0 {
		t.Fatal("the group still lists stopped processes")
	}
}

func TestStopReportsTimeout(t *testing.T) {
	p, err := Start(Options{Path: "/bin/sh", Args: []string{"-c", "trap '' TERM; echo armed; sleep 30 & wait"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitOutput(context.Background(), "armed", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var ste *StopTimeoutError
	if err := p.Stop(200 * time.Millisecond); !errors.As(err, &ste) {
		t.Fatalf("Stop of a process ignoring SIGTERM: %v, want *StopTimeoutError", err)
	}
	q, err := Start(Options{Path: "/bin/sh", Args: []string{"-c", "exec sleep 30"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Stop(10 * time.Second); err == nil {
		t.Fatal("a process killed by SIGTERM stopped cleanly")
	}
}
