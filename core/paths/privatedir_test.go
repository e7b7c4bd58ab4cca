package paths

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/paths/pathstest"
)

func TestEnsurePrivateDirCreates0700(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "wcache")
	if err := EnsurePrivateDir(dir); err != nil {
		t.Fatalf("EnsurePrivateDir: %v", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("mode = %s, want drwx------", fi.Mode())
	}
	// Idempotent on a directory that is already right.
	if err := EnsurePrivateDir(dir); err != nil {
		t.Fatalf("second EnsurePrivateDir: %v", err)
	}
}

func TestEnsurePrivateDirRefusals(t *testing.T) {
	base := t.TempDir()

	groupWritable := filepath.Join(base, "gw")
	mkdirMode(t, groupWritable, 0o770)

	worldReadable := filepath.Join(base, "wr")
	mkdirMode(t, worldReadable, 0o755)

	target := filepath.Join(base, "target")
	mustMkdir(t, target, 0o700)
	symlink := filepath.Join(base, "link")
	if err := os.Symlink(target, symlink); err != nil {
		t.Fatal(err)
	}

	foreign := filepath.Join(base, "foreign")
	mustMkdir(t, foreign, 0o700)
	if err := os.Chown(foreign, 65534, 65534); err != nil {
		t.Fatalf("chown to nobody (tests run as root): %v", err)
	}

	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		dir     string
		want    error
		mention string
	}{
		{groupWritable, ErrDirMode, "chmod 700"},
		{worldReadable, ErrDirMode, "0755"},
		{symlink, ErrDirSymlink, "symbolic link"},
		{foreign, ErrDirOwner, "uid 65534"},
		{file, ErrNotDir, "not a directory"},
	}
	for _, tc := range cases {
		err := EnsurePrivateDir(tc.dir)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.dir, err, tc.want)
			continue
		}
		var pe *PrivateDirError
		if !errors.As(err, &pe) || pe.Dir != tc.dir {
			t.Errorf("%s: err %v is not a *PrivateDirError for that dir", tc.dir, err)
		}
		if !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: message %q lacks %q", tc.dir, err, tc.mention)
		}
	}
	// Refused directories are left untouched.
	if fi, _ := os.Lstat(groupWritable); fi.Mode().Perm() != 0o770 {
		t.Errorf("group-writable dir was modified: %s", fi.Mode())
	}
}

func TestEnsurePrivateDirRelative(t *testing.T) {
	if err := EnsurePrivateDir("rel/wcache"); err == nil {
		t.Fatal("relative directory accepted")
	}
}

func TestLayoutForRefusesUnsafeDefaultDir(t *testing.T) {
	xdg := pathstest.ShortDir(t)
	mkdirMode(t, filepath.Join(xdg, "wcache"), 0o777)
	l, err := NewLayout(Options{Getenv: env(map[string]string{"XDG_RUNTIME_DIR": xdg})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.For(nvUUID); !errors.Is(err, ErrDirMode) {
		t.Fatalf("For with a world-writable default dir: %v", err)
	}
}

func TestDefaultDir(t *testing.T) {
	if got := DefaultDir(env(map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000"})); got != "/run/user/1000/wcache" {
		t.Fatalf("DefaultDir = %q", got)
	}
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/42")
	if got := DefaultDir(nil); got != "/run/user/42/wcache" {
		t.Fatalf("DefaultDir(nil) = %q, want it to read the process environment", got)
	}
}

func mustMkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
}

// mkdirMode makes dir with exactly mode, whatever the umask.
func mkdirMode(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	mustMkdir(t, dir, 0o700)
	mustChmod(t, dir, mode)
}

func mustChmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestEnsurePrivateDirChecksAncestors(t *testing.T) {
	base := t.TempDir()
	// Traversable (t.TempDir's parent too), so another uid reaches the
	// parents below.
	mustChmod(t, filepath.Dir(base), 0o711)
	mustChmod(t, base, 0o711)
	open := filepath.Join(base, "open")
	mkdirMode(t, open, 0o777)
	sticky := filepath.Join(base, "sticky")
	mkdirMode(t, sticky, 0o777|os.ModeSticky)
	foreign := filepath.Join(base, "foreign")
	mustMkdir(t, foreign, 0o755)
	if err := os.Chown(foreign, 65534, 65534); err != nil {
		t.Fatalf("chown to nobody (tests run as root): %v", err)
	}
	// A symlinked parent is judged by what it points to.
	link := filepath.Join(base, "link")
	if err := os.Symlink(open, link); err != nil {
		t.Fatal(err)
	}

	for _, dir := range []string{filepath.Join(open, "wcache"), filepath.Join(open, "deeper", "wcache"),
		filepath.Join(foreign, "wcache"), filepath.Join(link, "wcache2")} {
		err := EnsurePrivateDir(dir)
		if !errors.Is(err, ErrUnsafeAncestor) {
			t.Errorf("%s: err = %v, want ErrUnsafeAncestor", dir, err)
		}
	}
	if err := EnsurePrivateDir(filepath.Join(sticky, "wcache")); err != nil {
		t.Errorf("under a sticky world-writable parent: %v", err)
	}

	// What the check prevents, done by another uid for real: in the
	// non-sticky parent it renames our directory away, in the sticky one it
	// cannot.
	setpriv, err := exec.LookPath("setpriv")
	if err != nil || os.Geteuid() != 0 {
		t.Logf("skipping the rename by uid 65534: setpriv %v, euid %d", err, os.Geteuid())
		return
	}
	asNobody := func(args ...string) error {
		cmd := exec.Command(setpriv, append([]string{"--reuid", "65534", "--regid", "65534", "--clear-groups", "--"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if err := asNobody("mv", filepath.Join(open, "wcache"), filepath.Join(open, "stolen")); err != nil {
		t.Errorf("uid 65534 could not rename our directory in a non-sticky world-writable parent: %v", err)
	}
	if err := asNobody("mv", filepath.Join(sticky, "wcache"), filepath.Join(sticky, "stolen")); err == nil {
		t.Errorf("uid 65534 renamed our directory in a sticky parent")
	}
}
