package daemonfile

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/wcache/wcache/internal/procstat"
)

// TestVerifySuccessor: a helper process that holds the lock, listens and
// wrote its ready file is proven; the same checks against another pid, a
// process that only holds the lock, a ready file naming another process
// and a socket another process listens on each fail, naming what differs.
func TestVerifySuccessor(t *testing.T) {
	p := testPaths(t)
	d := startHelper(t, "daemon", p)
	d.expect(t, "ready")
	if err := VerifySuccessor(p, d.pid()); err != nil {
		t.Fatalf("a serving helper: %v", err)
	}
	// A pid of another PID namespace (SO_PEERCRED's 0) is never proven.
	if err := VerifySuccessor(p, 0); !errors.Is(err, ErrSuccessorUnproven) || !strings.Contains(err.Error(), "PID namespace") {
		t.Errorf("pid 0: %v, want the PID namespace named", err)
	}
	// Another live process of this uid (this test) holds nothing.
	err := VerifySuccessor(p, os.Getpid())
	if !errors.Is(err, ErrSuccessorUnproven) || !strings.Contains(err.Error(), "identity lock") {
		t.Errorf("this process: %v, want the identity lock named", err)
	}

	// A ready file that names another process (this one).
	start, err := procstat.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	r, err := ReadReady(p.Ready)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteReady(p.Ready, Ready{PID: os.Getpid(), StartTime: start, Socket: r.Socket}); err != nil {
		t.Fatal(err)
	}
	if err := VerifySuccessor(p, d.pid()); err == nil || !strings.Contains(err.Error(), "ready file") {
		t.Errorf("a ready file naming another pid: %v", err)
	}
	if err := WriteReady(p.Ready, r); err != nil {
		t.Fatal(err)
	}
	if err := VerifySuccessor(p, d.pid()); err != nil {
		t.Fatalf("the ready file restored: %v", err)
	}
	// No ready file.
	if err := os.Remove(p.Ready); err != nil {
		t.Fatal(err)
	}
	if err := VerifySuccessor(p, d.pid()); err == nil || !strings.Contains(err.Error(), "ready file") {
		t.Errorf("no ready file: %v", err)
	}
}

// TestVerifySuccessorLockOnly: a process that holds the identity lock but
// neither listens nor wrote a ready file (a successor that says "serving"
// too early, or lies) is not proven; nor is one whose socket path is a
// listener of another process.
func TestVerifySuccessorLockOnly(t *testing.T) {
	p := testPaths(t)
	d := startHelper(t, "locked", p)
	d.expect(t, "ready")
	if err := VerifySuccessor(p, d.pid()); err == nil || !strings.Contains(err.Error(), "socket") {
		t.Fatalf("lock only: %v, want the socket named", err)
	}
	ln := listenHere(t, p.Socket)
	defer ln.Close()
	err := VerifySuccessor(p, d.pid())
	if err == nil || !strings.Contains(err.Error(), "listens on it") {
		t.Fatalf("a socket this process listens on: %v, want the listener's pid named", err)
	}
}

// listenHere listens on a Unix socket at path in this process.
func listenHere(t *testing.T, path string) net.Listener {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
