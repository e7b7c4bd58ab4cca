package dist

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/paths/pathstest"
	"github.com/wcache/wcache/internal/version"
)

// repoRoot is the repository this test belongs to (it runs in test/dist).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// cleanEnv is a minimal environment without any WCACHE_* variable and with
// a PATH that holds none of the repository's binaries.
func cleanEnv(home string) []string {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + os.TempDir()}
	for _, kv := range os.Environ() {
		// The Go toolchain and cgo settings make uses; nothing of wcache's.
		for _, keep := range []string{"GOCACHE=", "GOMODCACHE=", "GOPATH=", "GOFLAGS=", "GOPROXY=", "GOTOOLCHAIN=", "CGO_CFLAGS="} {
			if strings.HasPrefix(kv, keep) {
				env = append(env, kv)
			}
		}
	}
	return env
}

// TestDistArchiveRunsFromItsOwnFiles builds the release archive with
// `make dist` for linux/amd64 under a test version, checks SHA256SUMS and the
// archive's exact contents, unpacks it with nothing else in the folder, and
// runs `wcache demo` (launch a TP=2 layout on the mock backend, attach,
// verify every byte, stop) from the unpacked files only: the plugins are
// found beside the CLI, not in the repository's bin/.
func TestDistArchiveRunsFromItsOwnFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds four release binaries")
	}
	root := repoRoot(t)
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH: %v", err)
	}
	out := t.TempDir()
	const testVersion = "9.8.7-disttest"
	cmd := exec.Command("make", "--no-print-directory", "dist", "DIST="+out, "DIST_PLATFORMS=linux/amd64",
		"VERSION="+testVersion, "GO="+gobin)
	cmd.Dir = root
	cmd.Env = append(cleanEnv(t.TempDir()), "GOCACHE="+goEnv(t, "GOCACHE"), "GOMODCACHE="+goEnv(t, "GOMODCACHE"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make dist: %v\n%s", err, b)
	}

	name := "wcache-" + testVersion + "-linux-amd64"
	archive := filepath.Join(out, name+".tar.gz")
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if want := hex.EncodeToString(sum[:]) + "  " + name + ".tar.gz\n"; string(sums) != want {
		t.Fatalf("SHA256SUMS = %q, want %q", sums, want)
	}

	// Unpack into a folder of its own; nothing else is there.
	dest := t.TempDir()
	files := untar(t, archive, dest)
	want := []string{
		name + "/bin/wcache", name + "/bin/wcache-backend-cuda", name + "/bin/wcache-backend-mock",
		name + "/bin/wcache-backend-rocm", name + "/operations.md",
		name + "/systemd/wcache.env", name + "/systemd/wcache@.service",
	}
	if !slices.Equal(files, want) {
		t.Fatalf("archive holds %q, want %q", files, want)
	}
	bin := filepath.Join(dest, name, "bin")

	run := func(args ...string) string {
		t.Helper()
		c := exec.Command(filepath.Join(bin, "wcache"), args...)
		c.Env = cleanEnv(t.TempDir())
		c.Dir = dest
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("wcache %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	if got := run("version"); !strings.HasPrefix(got, "wcache "+testVersion+" ") {
		t.Errorf("unpacked wcache version = %q, want the stamped %q", got, testVersion)
	}
	// Socket paths must fit in 107 bytes: a short folder, not t.TempDir().
	work, err := os.MkdirTemp("/tmp", "wd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	got := run("demo", "--dir", work)
	if !strings.Contains(got, "demo OK: 2 daemons launched, attached, verified byte for byte and stopped cleanly") {
		t.Fatalf("demo from the unpacked archive did not report success:\n%s", got)
	}
	if !strings.Contains(got, "(plugin "+filepath.Join(bin, "wcache-backend-mock")+")") {
		t.Errorf("demo did not use the unpacked mock plugin beside the CLI:\n%s", got)
	}
}

// TestPythonVersionIsTheGoRelease: the Python client's committed release
// string is internal/version's, so a wheel and the binaries of one commit agree
// (make wheel and make dist stamp VERSION into both).
func TestPythonVersionIsTheGoRelease(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "clients", "python", "src", "wcache", "_version.py"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^__version__ = "([^"]*)"$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("_version.py has no __version__ line:\n%s", b)
	}
	if string(m[1]) != version.Version {
		t.Errorf("Python client version %q, Go release %q: keep clients/python/src/wcache/_version.py equal to internal/version", m[1], version.Version)
	}
}

func goEnv(t *testing.T, key string) string {
	t.Helper()
	b, err := exec.Command("go", "env", key).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", key, err)
	}
	return strings.TrimSpace(string(b))
}

// untar unpacks a .tar.gz into dest and returns the regular files' names,
// sorted. Entries that are not plain files or folders, or that leave dest,
// fail the test.
func untar(t *testing.T, archive, dest string) []string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var files []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !filepath.IsLocal(h.Name) {
			t.Fatalf("archive entry %q leaves the folder", h.Name)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("archive entry %q owned by %d:%d, want 0:0", h.Name, h.Uid, h.Gid)
		}
		p := filepath.Join(dest, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			pathstest.WriteNew(t, p, os.FileMode(h.Mode)&0o755, tr)
			files = append(files, strings.TrimPrefix(h.Name, "./"))
		default:
			t.Fatalf("archive entry %q has type %c", h.Name, h.Typeflag)
		}
	}
	slices.Sort(files)
	return files
}
