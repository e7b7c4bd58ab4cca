package safefile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/safefile"
)

// place makes dir/name with mode and returns its path.
func place(t *testing.T, dir, name string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func mkdir(t *testing.T, dir string, mode os.FileMode) string {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// wantRefused asserts an *UntrustedError naming at with a reason saying
// says.
func wantRefused(t *testing.T, err error, at, says string) {
	t.Helper()
	var ue *safefile.UntrustedError
	if !errors.Is(err, safefile.ErrUntrusted) || !errors.As(err, &ue) || ue.Path != at || !strings.Contains(ue.Reason, says) {
		t.Fatalf("err %v, want an UntrustedError naming %s saying %q", err, at, says)
	}
}

func TestCheck(t *testing.T) {
	uid := os.Geteuid()
	root := t.TempDir()
	ok := mkdir(t, filepath.Join(root, "ok"), 0o755)
	cert := place(t, ok, "tls.crt", 0o644)
	if real, _, err := safefile.Check(cert, uid, safefile.Rule{}); err != nil || real != cert {
		t.Fatalf("a file only we can write: %q, %v", real, err)
	}

	t.Run("file writable by others", func(t *testing.T) {
		wantRefused(t, check(place(t, ok, "w.crt", 0o664), safefile.Rule{}), filepath.Join(ok, "w.crt"), "mode 0664")
	})
	t.Run("directory writable by others", func(t *testing.T) {
		open := mkdir(t, filepath.Join(root, "open"), 0o777)
		f := place(t, open, "ca.crt", 0o644)
		wantRefused(t, check(f, safefile.Rule{}), open, "without the sticky bit (mode 0777)")
	})
	t.Run("sticky directory", func(t *testing.T) {
		sticky := mkdir(t, filepath.Join(root, "sticky"), 0o777|os.ModeSticky)
		if err := check(place(t, sticky, "ca.crt", 0o644), safefile.Rule{}); err != nil {
			t.Fatalf("a file of ours in a sticky directory (others cannot replace it): %v", err)
		}
	})
	t.Run("link in a directory writable by others", func(t *testing.T) {
		open := mkdir(t, filepath.Join(root, "links"), 0o777)
		link := filepath.Join(open, "tls.crt")
		if err := os.Symlink(cert, link); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, check(link, safefile.Rule{}), open, "writable by group or others")
	})
	t.Run("link to a file in a directory writable by others", func(t *testing.T) {
		open := mkdir(t, filepath.Join(root, "target"), 0o775)
		f := place(t, open, "tls.crt", 0o644)
		link := filepath.Join(ok, "via-link.crt")
		if err := os.Symlink("../target/tls.crt", link); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, check(link, safefile.Rule{}), open, "mode 0775")
		_ = f
	})
	t.Run("secret", func(t *testing.T) {
		if err := check(place(t, ok, "k600.key", 0o600), safefile.Rule{Secret: true}); err != nil {
			t.Fatalf("a key of mode 0600: %v", err)
		}
		wantRefused(t, check(place(t, ok, "k644.key", 0o644), safefile.Rule{Secret: true}), filepath.Join(ok, "k644.key"), "readable by others (mode 0644)")
		wantRefused(t, check(place(t, ok, "k640.key", 0o640), safefile.Rule{Secret: true}), filepath.Join(ok, "k640.key"), "readable by its group (mode 0640)")
	})
	t.Run("executable", func(t *testing.T) {
		wantRefused(t, check(place(t, ok, "plugin", 0o644), safefile.Rule{Executable: true}), filepath.Join(ok, "plugin"), "not executable")
	})
	t.Run("directory chain", func(t *testing.T) {
		if err := safefile.CheckDirChain(ok, uid); err != nil {
			t.Fatal(err)
		}
		open := mkdir(t, filepath.Join(root, "chain"), 0o757)
		inner := mkdir(t, filepath.Join(open, "blobs"), 0o755)
		wantRefused(t, safefile.CheckDirChain(inner, uid), open, "mode 0757")
	})
}

// TestCheckOwners needs root: files and directories of another uid.
func TestCheckOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another uid")
	}
	const other = 4242
	root := t.TempDir()
	ok := mkdir(t, filepath.Join(root, "ok"), 0o755)
	theirs := place(t, ok, "theirs.crt", 0o644)
	if err := os.Chown(theirs, other, other); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, check(theirs, safefile.Rule{}), theirs, "owned by uid 4242")

	dir := mkdir(t, filepath.Join(root, "theirdir"), 0o755)
	if err := os.Chown(dir, other, other); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, check(place(t, dir, "ca.crt", 0o644), safefile.Rule{}), dir, "owned by uid 4242")

	// A daemon that is not root (uid 1000 here) reads a root-owned key
	// through its group (a Secret volume with fsGroup): group-readable is
	// accepted for root's key, never readable by others; a key of its own
	// must be 0600.
	key := place(t, ok, "root.key", 0o640)
	if _, _, err := safefile.Check(key, 1000, safefile.Rule{Secret: true}); err != nil {
		t.Fatalf("a root-owned 0640 key for a daemon of uid 1000: %v", err)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := safefile.Check(key, 1000, safefile.Rule{Secret: true}); err == nil {
		t.Fatal("a root-owned key readable by others was accepted")
	}
	own := place(t, ok, "own.key", 0o640)
	if err := os.Chown(own, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, func() error { _, _, err := safefile.Check(own, 1000, safefile.Rule{Secret: true}); return err }(), own, "readable by its group")
}

func check(path string, r safefile.Rule) error {
	_, _, err := safefile.Check(path, os.Geteuid(), r)
	return err
}
