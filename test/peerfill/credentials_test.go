package peerfill

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/peer/peertest"
	"github.com/wcache/wcache/test/netns"
	"github.com/wcache/wcache/test/testproc"
)

// Trust anchors of the peer port from safe places only (issue 35 item 6),
// through real daemons.

// swapFiles writes src's credentials files over dst's (each beside, then
// renamed: a Secret volume's atomic update).
func swapFiles(t *testing.T, src, dst *peer.Credentials) {
	t.Helper()
	for _, f := range [][2]string{{src.CertFile, dst.CertFile}, {src.KeyFile, dst.KeyFile}, {src.CAFile, dst.CAFile}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f[1]+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f[1]+".new", f[1]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDaemonCredentialsReadOnceReloadedBySignal: daemon A's credentials
// files are rewritten with another CA's (as a user able to write them, or
// a rotation, would): A keeps using the ones it read at start — a B of the
// new CA is refused and reads its files — until A is sent SIGUSR1, which
// reads and checks them again; then a B of the new CA fills from A. Moved
// to a folder others can write, the next SIGUSR1 is refused (logged,
// naming the folder) and A keeps serving the credentials in use.
func TestDaemonCredentialsReadOnceReloadedBySignal(t *testing.T) {
	m := model(t)
	oldCA, newCA := peertest.NewCA(t, "old CA"), peertest.NewCA(t, "new CA")
	credsA := oldCA.Issue(t, "node-a", oldCA)
	d := startA(t, m.Dir, credsA)
	swapFiles(t, newCA.Issue(t, "node-a", newCA), credsA)

	d.b.serve(t, m.Dir, append([]string{"--peers", d.peerAt}, certArgs(newCA.Issue(t, "node-b", newCA))...)...)
	wantFiles(t, d.b, m, "certificate")
	d.b.proc.Kill()

	if err := d.a.proc.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if err := d.a.proc.WaitOutput(t.Context(), "peer credentials reloaded", startTimeout); err != nil {
		t.Fatal(err)
	}
	b2 := newNode(t, d.b.h)
	b2.cacheDigests(t, m)
	b2.serve(t, m.Dir, append([]string{"--peers", d.peerAt}, certArgs(newCA.Issue(t, "node-b", newCA))...)...)
	if g := generation(t, b2); g.FilledFrom != "peer "+d.peerAt {
		t.Fatalf("a B of the new CA after A's SIGUSR1: filled_from %q, fill_fallback %q\n%s", g.FilledFrom, g.FillFallback, d.a.proc)
	}
	b2.proc.Kill()

	if err := os.Chmod(filepath.Dir(credsA.CAFile), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := d.a.proc.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if err := d.a.proc.WaitOutput(t.Context(), "peer credentials not reloaded", startTimeout); err != nil {
		t.Fatal(err)
	}
	if out := d.a.proc.Output(); !strings.Contains(out, filepath.Dir(credsA.CAFile)+" is a directory writable by group or others") {
		t.Fatalf("A's log does not name the unsafe folder:\n%s", out)
	}
	b3 := newNode(t, d.b.h)
	b3.cacheDigests(t, m)
	b3.serve(t, m.Dir, append([]string{"--peers", d.peerAt}, certArgs(newCA.Issue(t, "node-b", newCA))...)...)
	if g := generation(t, b3); g.FilledFrom != "peer "+d.peerAt {
		t.Fatalf("after a refused reload A should serve with the credentials in use: filled_from %q, fill_fallback %q\n%s", g.FilledFrom, g.FillFallback, d.a.proc)
	}
}

// TestDaemonCredentialsFromUnsafePlacesRefused: serve with a --peer-ca in
// a folder others can write, or a --peer-key readable by others, does not
// start: it exits 1 naming the folder or the file and its mode.
func TestDaemonCredentialsFromUnsafePlacesRefused(t *testing.T) {
	m := model(t)
	ca := peertest.NewCA(t, "wcache test CA")
	pair := netns.New(t)
	for _, c := range []struct {
		name string
		harm func(cr *peer.Credentials) string
	}{
		{"CA in a folder others can write", func(cr *peer.Credentials) string {
			if err := os.Chmod(filepath.Dir(cr.CAFile), 0o777); err != nil {
				t.Fatal(err)
			}
			return filepath.Dir(cr.CAFile) + " is a directory writable by group or others without the sticky bit (mode 0777)"
		}},
		{"key readable by others", func(cr *peer.Credentials) string {
			if err := os.Chmod(cr.KeyFile, 0o644); err != nil {
				t.Fatal(err)
			}
			return cr.KeyFile + " is a private key readable by others (mode 0644)"
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cr := ca.Issue(t, "node-a", ca)
			says := c.harm(cr)
			n := newNode(t, pair.A)
			p, err := n.h.Start(testproc.Options{Path: filepath.Join(binDir(t), "wcache"), Dir: n.w.Root, Env: n.w.Env(),
				Args: testproc.ServeArgs("mock", 0, append([]string{"--model", m.Dir, "--peer-listen", pair.A.Addr.String() + ":" + peerPort}, certArgs(cr)...)...)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Kill)
			code, ok := p.Wait(startTimeout)
			if !ok || code == 0 || !strings.Contains(p.Output(), says) {
				t.Fatalf("serve with unsafe credentials: exited %v, code %d; want a failure saying %q\n%s", ok, code, says, p)
			}
		})
	}
}
