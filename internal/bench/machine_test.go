package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestParseCPUInfoAndMemInfo(t *testing.T) {
	model, virt := parseCPUInfo([]byte("processor\t: 0\nmodel name\t: AMD EPYC 9654\nflags\t\t: fpu vme hypervisor sse\n\nprocessor\t: 1\nmodel name\t: other\n"))
	if model != "AMD EPYC 9654" || !virt {
		t.Errorf("parseCPUInfo = %q, %v", model, virt)
	}
	if got := parseMemTotal([]byte("MemTotal:       24576000 kB\nMemFree: 1 kB\n")); got != 24576000*1024 {
		t.Errorf("parseMemTotal = %d", got)
	}
	if got := osPrettyName([]byte("NAME=x\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n")); got != "Debian GNU/Linux 12 (bookworm)" {
		t.Errorf("osPrettyName = %q", got)
	}
	for in, want := range map[string]string{"always within_size advise [never] deny force\n": "never",
		"[always] never": "always", "always never": "", "": ""} {
		if got := selectedMode(in); got != want {
			t.Errorf("selectedMode(%q) = %q, want %q", in, got, want)
		}
	}
	m := ReadMachine()
	if m.Cores < 1 || m.GoVersion == "" || m.MemoryBytes == 0 {
		t.Errorf("ReadMachine = %+v", m)
	}
}

func TestReadCommitIgnoresTheReportsItWrites(t *testing.T) {
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
	report := filepath.Join(dir, "docs", "benchmarks.md")
	if err := os.MkdirAll(filepath.Dir(report), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(report, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := ReadCommit(ctx, dir, report)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Hash) != 40 || c.Dirty {
		t.Errorf("with only the report changed: %+v, want clean", c)
	}
	if c, _ = ReadCommit(ctx, dir); !c.Dirty {
		t.Error("an untracked report must count as dirty when not excluded")
	}
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, _ = ReadCommit(ctx, dir, report); !c.Dirty {
		t.Error("a changed tracked file must make the tree dirty")
	}
	if _, err := ReadCommit(ctx, t.TempDir()); err == nil {
		t.Error("ReadCommit outside a repository succeeded")
	}
}
