package benchreport

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestReadMachine(t *testing.T) {
	for in, want := range map[string]string{"always within_size advise [never] deny force\n": "never",
		"[always] never": "always", "always never": "", "": ""} {
		if got := selectedMode(in); got != want {
			t.Errorf("selectedMode(%q) = %q, want %q", in, got, want)
		}
	}
	m := ReadMachine()
	if m.Cores < 1 || m.GoVersion == "" || m.MemoryBytes == 0 || m.CPUModel == "" || m.Kernel == "" {
		t.Errorf("ReadMachine = %+v", m)
	}
}

func TestReadCommit(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "a")
	git("commit", "-q", "-m", "a")
	ctx := context.Background()
	c, err := ReadCommit(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Hash) != 40 || c.Dirty {
		t.Errorf("fresh commit: %+v, want clean", c)
	}
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, _ = ReadCommit(ctx, dir); !c.Dirty {
		t.Error("a changed tracked file must make the tree dirty")
	}
	if _, err := ReadCommit(ctx, t.TempDir()); err == nil {
		t.Error("ReadCommit outside a repository succeeded")
	}
}
