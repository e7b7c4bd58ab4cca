package hubcache_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/hubcache"
)

const commit = "0123456789abcdef0123456789abcdef01234567"

// hubLayout writes <cache>/models--org--name with refs/main -> commit and
// a snapshot whose file is a symlink into blobs/.
func hubLayout(t *testing.T, cache string) string {
	t.Helper()
	repo := filepath.Join(cache, "models--org--name")
	snap := filepath.Join(repo, "snapshots", commit)
	for _, d := range []string{filepath.Join(repo, "refs"), filepath.Join(repo, "blobs"), snap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "blobs", "abc"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../blobs/abc", filepath.Join(snap, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestResolve(t *testing.T) {
	root := t.TempDir()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	snap := hubLayout(t, filepath.Join(root, "hf", "hub"))
	for _, c := range []struct {
		model string
		env   map[string]string
		want  string
	}{
		{"org/name", map[string]string{"HF_HOME": filepath.Join(root, "hf")}, snap},
		{"org/name@main", map[string]string{"HF_HUB_CACHE": filepath.Join(root, "hf", "hub")}, snap},
		{"org/name@" + commit, map[string]string{"HF_HUB_CACHE": filepath.Join(root, "hf", "hub")}, snap},
		{"org/name", map[string]string{"XDG_CACHE_HOME": root, "HF_HOME": filepath.Join(root, "hf")}, snap},
		{root, nil, root}, // a directory stays itself
		{"./org/name", nil, "./org/name"},
	} {
		got, err := hubcache.Resolve(c.model, env(c.env))
		if err != nil || got != c.want {
			t.Errorf("Resolve(%q, %v) = %q, %v; want %q", c.model, c.env, got, err, c.want)
		}
	}
	_, err := hubcache.Resolve("org/other@v2", env(map[string]string{"HF_HUB_CACHE": filepath.Join(root, "hf", "hub")}))
	var nc *hubcache.NotCachedError
	if !errors.As(err, &nc) || !errors.Is(err, hubcache.ErrNotCached) || !strings.Contains(err.Error(), filepath.Join(root, "hf", "hub", "models--org--other", "refs", "v2")) {
		t.Fatalf("absent id: %v; want a NotCachedError naming where it looked", err)
	}
	if hubcache.IsID("./org/name") || hubcache.IsID("/abs/dir") || hubcache.IsID("a/b/c") || !hubcache.IsID("org/na.me@v1.0") {
		t.Fatal("IsID")
	}
}

// TestHubIDWinsOverARelativeDirectory: in a working directory that holds
// ./org/name (another user may have planted it in /tmp), "org/name" still
// names the hub cache's snapshot; "./org/name" names the directory; an id
// absent from the cache is an error that names the directory and how to
// pass it, never a fallback to it.
func TestHubIDWinsOverARelativeDirectory(t *testing.T) {
	root := t.TempDir()
	cache := filepath.Join(root, "hf", "hub")
	snap := hubLayout(t, cache)
	env := func(k string) string { return map[string]string{"HF_HUB_CACHE": cache}[k] }
	work := filepath.Join(root, "work")
	for _, d := range []string{filepath.Join(work, "org", "name"), filepath.Join(work, "org", "absent")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(work)
	if got, err := hubcache.Resolve("org/name", env); err != nil || got != snap {
		t.Fatalf("Resolve(org/name) beside ./org/name = %q, %v; want the snapshot %s", got, err, snap)
	}
	if got, err := hubcache.Resolve("./org/name", env); err != nil || got != "./org/name" {
		t.Fatalf("Resolve(./org/name) = %q, %v; want the directory", got, err)
	}
	_, err := hubcache.Resolve("org/absent", env)
	var nc *hubcache.NotCachedError
	if !errors.As(err, &nc) || nc.LocalDir != "org/absent" || !strings.Contains(err.Error(), "pass ./org/absent") {
		t.Fatalf("Resolve(org/absent) beside ./org/absent = %v; want a NotCachedError saying to pass ./org/absent", err)
	}
}
