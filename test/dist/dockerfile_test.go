package dist

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/internal/version"
)

// dockerfile is what the tests read of the Dockerfile: the sources of its
// COPY instructions from the build context, the runtime stage's copies
// from the build stage, its USER, and the default of ARG VERSION.
type dockerfile struct {
	ContextSources []string
	FromBuild      [][2]string // source, destination
	User           string
	Version        string
	Entrypoint     string
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var d dockerfile
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch f[0] {
		case "COPY":
			args := f[1:]
			if strings.HasPrefix(args[0], "--from=") {
				d.FromBuild = append(d.FromBuild, [2]string{args[1], args[len(args)-1]})
				continue
			}
			d.ContextSources = append(d.ContextSources, args[:len(args)-1]...)
		case "USER":
			d.User = f[1]
		case "ARG":
			if v, ok := strings.CutPrefix(f[1], "VERSION="); ok {
				d.Version = v
			}
		case "ENTRYPOINT":
			d.Entrypoint = strings.Join(f[1:], " ")
		}
	}
	return d
}

// TestDockerfileCopiesWhatTheBuildNeeds: every file or folder the Dockerfile
// copies from the build context exists, and together they hold every
// package of this module that the binaries of make dist import (so the
// image's `make dist` builds what CI's does).
func TestDockerfileCopiesWhatTheBuildNeeds(t *testing.T) {
	root := repoRoot(t)
	d := readDockerfile(t)
	if len(d.ContextSources) == 0 {
		t.Fatal("Dockerfile copies nothing from the build context")
	}
	for _, src := range d.ContextSources {
		if _, err := os.Stat(filepath.Join(root, src)); err != nil {
			t.Errorf("Dockerfile copies %s: %v", src, err)
		}
	}
	for _, need := range []string{"Makefile", "build/dist.sh", "deploy/systemd/wcache@.service", "deploy/systemd/wcache.env", "docs/operations.md"} {
		if !copied(d.ContextSources, need) {
			t.Errorf("make dist needs %s, which the Dockerfile does not copy", need)
		}
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{end}}",
		"./cmd/wcache", "./plugins/mock", "./plugins/cuda", "./plugins/rocm")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue // a dependency from the module cache: go mod download fetches it
		}
		if !copied(d.ContextSources, rel) {
			t.Errorf("the binaries import %s, which the Dockerfile does not copy", rel)
		}
	}
}

// copied reports whether path is one of srcs or inside a folder of srcs.
func copied(srcs []string, path string) bool {
	for _, s := range srcs {
		s = strings.TrimSuffix(strings.TrimPrefix(s, "./"), "/")
		if path == s || strings.HasPrefix(path, s+"/") {
			return true
		}
	}
	return false
}

// TestDaemonSetsRunTheImage: both shipped DaemonSets name the image the
// Dockerfile builds for this release, as its user, and run the wcache it
// puts on PATH beside its plugins.
func TestDaemonSetsRunTheImage(t *testing.T) {
	d := readDockerfile(t)
	if d.Version != version.Version {
		t.Errorf("Dockerfile ARG VERSION=%s, release %s", d.Version, version.Version)
	}
	if d.Entrypoint != `["wcache"]` {
		t.Errorf("Dockerfile ENTRYPOINT %s, want [\"wcache\"]", d.Entrypoint)
	}
	binOnPath := false
	for _, c := range d.FromBuild {
		if c[0] == "/release/bin/" && c[1] == "/usr/local/bin/" {
			binOnPath = true
		}
	}
	if !binOnPath {
		t.Errorf("Dockerfile does not copy the release's bin/ (wcache and its plugins) to /usr/local/bin/: %q", d.FromBuild)
	}
	uid, _, _ := strings.Cut(d.User, ":")
	for _, name := range []string{"daemonset.yaml", "daemonset-model.yaml"} {
		c := readDaemonSet(t, name)
		if want := "ghcr.io/wcache/wcache:" + version.Version; c.Image != want {
			t.Errorf("%s: image %s, want %s (the Dockerfile's, tagged with the release)", name, c.Image, want)
		}
		if c.RunAsUser != uid {
			t.Errorf("%s: runAsUser %s, the image's USER is %s", name, c.RunAsUser, d.User)
		}
		if c.Command[0] != "wcache" {
			t.Errorf("%s: command runs %s, not the image's wcache", name, c.Command[0])
		}
	}
}
