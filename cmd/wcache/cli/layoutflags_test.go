package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/wcache/wcache/core/paths"
)

// TestReadyTemplateHelpSaysWhereTheReadyFileGoes: with a custom socket
// template and no ready template, the ready file stays in the default
// directory, not next to the socket; the help text must say so.
func TestReadyTemplateHelpSaysWhereTheReadyFileGoes(t *testing.T) {
	runtime := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", runtime)
	t.Setenv(paths.EnvSocketTemplate, "")
	t.Setenv(paths.EnvReadyTemplate, "")
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	lf := addLayoutFlags(fs)
	sockets := filepath.Join(t.TempDir(), "elsewhere")
	if err := fs.Parse([]string{"--socket-template", sockets + "/" + paths.DeviceUUIDPlaceholder + ".sock"}); err != nil {
		t.Fatal(err)
	}
	layout, err := lf.layout()
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.Derive("GPU-1")
	if err != nil {
		t.Fatal(err)
	}
	wantDir := paths.DefaultDir(nil)
	if filepath.Dir(p.Socket) != sockets || p.Ready != filepath.Join(wantDir, "GPU-1.ready.json") ||
		p.Lock != p.Ready+paths.LockSuffix {
		t.Fatalf("paths %+v: want the socket in %s and the ready and lock files in %s", p, sockets, wantDir)
	}

	help := fs.Lookup("ready-template").Usage
	for _, want := range []string{"$" + paths.EnvReadyTemplate, paths.DefaultReadyName, "default directory",
		"$XDG_RUNTIME_DIR", "even when the socket template is set", paths.LockSuffix} {
		if !strings.Contains(help, want) {
			t.Errorf("--ready-template help %q lacks %q", help, want)
		}
	}
	if strings.Contains(help, "next to the socket") {
		t.Errorf("--ready-template help %q claims the ready file follows the socket", help)
	}
}
