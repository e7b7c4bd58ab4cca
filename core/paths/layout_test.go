package paths

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/paths/pathstest"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestNewLayoutDefaultsUnderXDG(t *testing.T) {
	xdg := pathstest.ShortDir(t)
	l, err := NewLayout(Options{Getenv: env(map[string]string{"XDG_RUNTIME_DIR": xdg})})
	if err != nil {
		t.Fatalf("NewLayout: %v", err)
	}
	dir := filepath.Join(xdg, "wcache")
	if l.Dir != dir {
		t.Fatalf("Dir = %q, want %q", l.Dir, dir)
	}
	p, err := l.For(nvUUID)
	if err != nil {
		t.Fatalf("For: %v", err)
	}
	want := Paths{
		DeviceUUID: nvUUID,
		Socket:     filepath.Join(dir, nvUUID+".sock"),
		Ready:      filepath.Join(dir, nvUUID+".ready.json"),
		Lock:       filepath.Join(dir, nvUUID+".ready.json.lock"),
	}
	if p != want {
		t.Fatalf("For = %+v, want %+v", p, want)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Fatalf("default dir not created: %v", err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("default dir mode = %s, want drwx------", fi.Mode())
	}
	if g := l.ReadyGlob(); g != filepath.Join(dir, "*.ready.json") {
		t.Fatalf("ReadyGlob = %q", g)
	}
}

func TestNewLayoutDefaultWithoutXDG(t *testing.T) {
	for _, xdg := range []string{"", "relative/run"} {
		l, err := NewLayout(Options{Getenv: env(map[string]string{"XDG_RUNTIME_DIR": xdg})})
		if err != nil {
			t.Fatalf("NewLayout: %v", err)
		}
		want := "/tmp/wcache-" + strconv.Itoa(os.Geteuid())
		if l.Dir != want || l.Socket.String() != want+"/{device_uuid}.sock" || l.Ready.String() != want+"/{device_uuid}.ready.json" {
			t.Fatalf("XDG_RUNTIME_DIR=%q: layout %+v, want dir %s", xdg, l, want)
		}
	}
}

func TestPathsUniquePerUUID(t *testing.T) {
	l, err := NewLayout(Options{Getenv: env(map[string]string{"XDG_RUNTIME_DIR": pathstest.ShortDir(t)})})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, u := range []string{nvUUID, amdUUID, "GPU-1", "GPU-10", "MIG-1", "gpu-1"} {
		p, err := l.For(u)
		if err != nil {
			t.Fatalf("For(%q): %v", u, err)
		}
		for _, path := range []string{p.Socket, p.Ready, p.Lock} {
			if prev, dup := seen[path]; dup {
				t.Fatalf("path %s shared by %s and %s", path, prev, u)
			}
			seen[path] = u
			if !strings.Contains(path, u) {
				t.Fatalf("path %s does not contain UUID %s", path, u)
			}
		}
		if got, ok := l.ReadyUUID(p.Ready); !ok || got != u {
			t.Fatalf("ReadyUUID(%s) = %q, %v", p.Ready, got, ok)
		}
		if _, ok := l.ReadyUUID(p.Lock); ok {
			t.Fatalf("ReadyUUID accepted the lock file %s", p.Lock)
		}
	}
}

func TestCustomTemplatesPrecedence(t *testing.T) {
	dir := pathstest.ShortDir(t)
	e := env(map[string]string{
		EnvSocketTemplate: dir + "/env-{device_uuid}.sock",
		EnvReadyTemplate:  dir + "/env-{device_uuid}.json",
		"XDG_RUNTIME_DIR": dir,
	})
	l, err := NewLayout(Options{Getenv: e})
	if err != nil {
		t.Fatal(err)
	}
	if l.Dir != "" {
		t.Fatalf("Dir = %q with both templates from the environment", l.Dir)
	}
	p, err := l.For(amdUUID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Socket != dir+"/env-"+amdUUID+".sock" || p.Ready != dir+"/env-"+amdUUID+".json" || p.Lock != p.Ready+".lock" {
		t.Fatalf("env templates not honoured: %+v", p)
	}
	if _, err := os.Stat(filepath.Join(dir, "wcache")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("default dir created although unused: %v", err)
	}

	l, err = NewLayout(Options{SocketTemplate: dir + "/flag-{device_uuid}.sock", Getenv: e})
	if err != nil {
		t.Fatal(err)
	}
	p, err = l.For(amdUUID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Socket != dir+"/flag-"+amdUUID+".sock" || p.Ready != dir+"/env-"+amdUUID+".json" {
		t.Fatalf("flag does not win over env: %+v", p)
	}
}

func TestNewLayoutNamesSource(t *testing.T) {
	_, err := NewLayout(Options{Getenv: env(map[string]string{EnvReadyTemplate: "/tmp/ready.json"})})
	var te *TemplateError
	if !errors.As(err, &te) || te.Source != EnvReadyTemplate || !errors.Is(err, ErrMissingPlaceholder) {
		t.Fatalf("err = %v, want missing placeholder naming %s", err, EnvReadyTemplate)
	}
	_, err = NewLayout(Options{SocketTemplate: "/tmp/{rank}.sock", Getenv: env(nil)})
	if !errors.As(err, &te) || te.Source != FlagSocketTemplate || !errors.Is(err, ErrUnknownPlaceholder) {
		t.Fatalf("err = %v, want unknown placeholder naming %s", err, FlagSocketTemplate)
	}
}

func TestNewLayoutRefusesCollision(t *testing.T) {
	for _, sock := range []string{"/t/{device_uuid}.json", "/t/{device_uuid}.json.lock"} {
		_, err := NewLayout(Options{SocketTemplate: sock, ReadyTemplate: "/t/{device_uuid}.json", Getenv: env(nil)})
		if !errors.Is(err, ErrUnsafeTemplate) {
			t.Fatalf("socket %s: err = %v, want ErrUnsafeTemplate", sock, err)
		}
	}
}

func TestForRefusesBadUUID(t *testing.T) {
	l, err := NewLayout(Options{Getenv: env(map[string]string{"XDG_RUNTIME_DIR": pathstest.ShortDir(t)})})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "../x", "/", "x\x00", "a.b"} {
		if _, err := l.For(bad); !errors.Is(err, ErrInvalidUUID) {
			t.Errorf("For(%q): err = %v, want ErrInvalidUUID", bad, err)
		}
	}
}

func TestForRefusesLongSocketPath(t *testing.T) {
	long := "/" + strings.Repeat("d", 70) + "/{device_uuid}.sock"
	l, err := NewLayout(Options{SocketTemplate: long, ReadyTemplate: "/r/{device_uuid}.json", Getenv: env(nil)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.For(nvUUID)
	var se *SocketPathTooLongError
	if !errors.As(err, &se) || !errors.Is(err, ErrSocketPathTooLong) {
		t.Fatalf("err = %v, want *SocketPathTooLongError", err)
	}
	wantPath := "/" + strings.Repeat("d", 70) + "/" + nvUUID + ".sock"
	if se.Path != wantPath || se.Len != len(wantPath) {
		t.Fatalf("error carries %q (%d), want %q (%d)", se.Path, se.Len, wantPath, len(wantPath))
	}
	for _, m := range []string{wantPath, strconv.Itoa(len(wantPath)), EnvSocketTemplate, "XDG_RUNTIME_DIR"} {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("message %q lacks %q", err, m)
		}
	}
	// Exactly at the limit is fine.
	atLimit := "/" + strings.Repeat("d", MaxSocketPathLen-len("/")-len("/.s")-len(nvUUID)) + "/{device_uuid}.s"
	l.Socket = MustParseTemplate("t", atLimit)
	p, err := l.For(nvUUID)
	if err != nil || len(p.Socket) != MaxSocketPathLen {
		t.Fatalf("socket path of %d bytes: %v", len(p.Socket), err)
	}
}

func TestDeriveTouchesNothing(t *testing.T) {
	xdg := pathstest.ShortDir(t)
	l, err := NewLayout(Options{Getenv: env(map[string]string{"XDG_RUNTIME_DIR": xdg})})
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Derive(nvUUID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Socket != filepath.Join(xdg, "wcache", nvUUID+".sock") || p.Lock != p.Ready+LockSuffix {
		t.Fatalf("Derive = %+v", p)
	}
	if _, err := os.Lstat(l.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Derive created the default dir: %v", err)
	}
	if _, err := l.Derive("../x"); !errors.Is(err, ErrInvalidUUID) {
		t.Fatalf("Derive(../x): %v", err)
	}
	// For on the same layout creates it.
	if q, err := l.For(nvUUID); err != nil || q != p {
		t.Fatalf("For = %+v, %v; want %+v", q, err, p)
	}
}
