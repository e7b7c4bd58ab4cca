package peer_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/peer/peertest"
	"github.com/wcache/wcache/core/safefile"
)

// replace writes src's bytes beside dst and renames them over it (a new
// inode, as a Secret volume's atomic update gives).
func replace(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".new", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".new", dst); err != nil {
		t.Fatal(err)
	}
}

// TestCredentialsReadOnceReloadedOnRequest rotates the server's files to a
// new CA (as cert-manager rewrites a Secret): nothing changes until Reload
// (serve's SIGUSR1), which reads and checks them again; from then on
// clients of the old CA are refused and clients of the new one served,
// without a restart. A reload that fails (a file moved to an unsafe place)
// keeps the credentials in use.
func TestCredentialsReadOnceReloadedOnRequest(t *testing.T) {
	oldCA, newCAuth := peertest.NewCA(t, "old CA"), peertest.NewCA(t, "new CA")
	creds := oldCA.Issue(t, "node-a", oldCA)
	addr, _ := serve(t, newSource(content(1<<20, 1)), creds, peer.ServerOptions{})
	oldClient, newClient := oldCA.Issue(t, "node-b", oldCA), newCAuth.Issue(t, "node-b", newCAuth)
	if _, err := peer.Fetch(t.Context(), identity, &peertest.MemSink{}, fetchOpts(oldClient, addr)); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	rotated := newCAuth.Issue(t, "node-a", newCAuth)
	for _, f := range [][2]string{{rotated.CertFile, creds.CertFile}, {rotated.KeyFile, creds.KeyFile}, {rotated.CAFile, creds.CAFile}} {
		replace(t, f[0], f[1])
	}
	if _, err := peer.Fetch(t.Context(), identity, &peertest.MemSink{}, fetchOpts(oldClient, addr)); err != nil {
		t.Fatalf("a client of the old CA after the files changed, before Reload: %v (the files are read once)", err)
	}
	if err := creds.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Fetch(t.Context(), identity, &peertest.MemSink{}, fetchOpts(oldClient, addr)); !errors.Is(err, peer.ErrNoPeer) {
		t.Fatalf("a client of the old CA after Reload: %v, want refused", err)
	}
	if _, err := peer.Fetch(t.Context(), identity, &peertest.MemSink{}, fetchOpts(newClient, addr)); err != nil {
		t.Fatalf("a client of the new CA after Reload: %v", err)
	}

	// The CA's folder opened to everyone: the reload is refused, naming
	// it, and the new CA's clients are still served.
	if err := os.Chmod(filepath.Dir(creds.CAFile), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := creds.Reload(); !errors.Is(err, peer.ErrUnsafeCredentials) || !strings.Contains(err.Error(), filepath.Dir(creds.CAFile)) {
		t.Fatalf("Reload from a folder others can write: %v, want ErrUnsafeCredentials naming the folder", err)
	}
	if _, err := peer.Fetch(t.Context(), identity, &peertest.MemSink{}, fetchOpts(newClient, addr)); err != nil {
		t.Fatalf("after a refused reload: %v", err)
	}
}

// TestCredentialsFromUnsafePlacesRefused: a CA bundle in a folder others
// can write (they could swap in their own CA), a certificate others can
// write, a key readable by group or others: the server does not start,
// and the error names the file or folder and its mode.
func TestCredentialsFromUnsafePlacesRefused(t *testing.T) {
	authority := peertest.NewCA(t, "wcache test CA")
	certFile := func(cr *peer.Credentials) string { return cr.CertFile }
	keyFile := func(cr *peer.Credentials) string { return cr.KeyFile }
	// chmod is a harm that sets the mode of the file of cr that file names.
	chmod := func(file func(*peer.Credentials) string, mode os.FileMode) func(*peer.Credentials) string {
		return func(cr *peer.Credentials) string {
			if err := os.Chmod(file(cr), mode); err != nil {
				t.Fatal(err)
			}
			return file(cr)
		}
	}
	for _, c := range []struct {
		name string
		harm func(cr *peer.Credentials) (at string)
		says string
	}{
		{"CA in a folder others can write", func(cr *peer.Credentials) string {
			dir := filepath.Join(t.TempDir(), "shared")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			ca := filepath.Join(dir, "ca.crt")
			replace(t, cr.CAFile, ca)
			cr.CAFile = ca
			return dir
		}, "writable by group or others without the sticky bit (mode 0777)"},
		{"certificate others can write", chmod(certFile, 0o666), "writable by group or others (mode 0666)"},
		{"key readable by others", chmod(keyFile, 0o644), "private key readable by others (mode 0644)"},
		{"key readable by its group", chmod(keyFile, 0o640), "private key readable by its group (mode 0640)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cr := authority.Issue(t, "node-a", authority)
			at := c.harm(cr)
			_, err := peer.NewServer(newSource(content(1, 1)), cr, peer.ServerOptions{})
			var ue *safefile.UntrustedError
			if !errors.Is(err, peer.ErrUnsafeCredentials) || !errors.As(err, &ue) || ue.Path != at || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("NewServer: %v; want ErrUnsafeCredentials naming %s saying %q", err, at, c.says)
			}
		})
	}
}

// TestAllowedNamesMatchSANsBeforeCN: a certificate with SANs is named by
// them only (its common name is not matched, as crypto/x509 does); one
// without SANs by its common name.
func TestAllowedNamesMatchSANsBeforeCN(t *testing.T) {
	authority := peertest.NewCA(t, "wcache test CA")
	for _, c := range []struct {
		name    string
		client  *peer.Credentials
		allowed string
		ok      bool
	}{
		{"SAN allowed", authority.Issue(t, "node-b", authority), "spiffe://test/node-b", true},
		{"CN of a certificate with SANs", authority.Issue(t, "node-b", authority), "node-b", false},
		{"CN of a certificate without SANs", authority.IssueCN(t, "node-b", authority), "node-b", true},
		{"another CN", authority.IssueCN(t, "node-x", authority), "node-b", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			creds := authority.Issue(t, "node-a", authority)
			creds.AllowedNames = []string{c.allowed}
			addr, _ := serve(t, newSource(content(1<<20, 1)), creds, peer.ServerOptions{})
			_, err := peer.Fetch(t.Context(), identity, &peertest.MemSink{}, fetchOpts(c.client, addr))
			if c.ok && err != nil || !c.ok && !errors.Is(err, peer.ErrNoPeer) {
				t.Fatalf("allowed %q: %v, want served %v", c.allowed, err, c.ok)
			}
		})
	}
}
