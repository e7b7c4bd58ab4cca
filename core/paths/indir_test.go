package paths

import (
	"path/filepath"
	"testing"
)

func TestInDirIgnoresTheEnvironment(t *testing.T) {
	t.Setenv("WCACHE_SOCKET_TEMPLATE", "/elsewhere/{device_uuid}.sock")
	dir := t.TempDir()
	l, err := InDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.For("GPU-11111111-2222-3333-4444-555555555555")
	if err != nil {
		t.Fatal(err)
	}
	if p.Socket != filepath.Join(dir, "GPU-11111111-2222-3333-4444-555555555555.sock") ||
		p.Ready != filepath.Join(dir, "GPU-11111111-2222-3333-4444-555555555555.ready") {
		t.Errorf("paths %+v, want both in %s", p, dir)
	}
	if _, err := InDir("relative"); err == nil {
		t.Error("a relative folder was accepted")
	}
}
