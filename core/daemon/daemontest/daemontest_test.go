package daemontest_test

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/daemon/daemontest"
	"github.com/wcache/wcache/sdk/names"
)

// TestServesTheCheckpointOverItsSocket attaches through the real socket
// and reads every tensor's bytes from the exported allocation file.
func TestServesTheCheckpointOverItsSocket(t *testing.T) {
	var dir string
	t.Run("daemon", func(t *testing.T) {
		d := daemontest.Start(t, daemontest.Options{})
		dir = d.Dir
		if fi, err := os.Lstat(d.Socket()); err != nil || fi.Mode().Type() != os.ModeSocket {
			t.Fatalf("socket %s: %v", d.Socket(), err)
		}
		a, err := d.Attach(t, nil)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		defer a.Lease.Close()
		m := a.Manifest
		if m.DeviceUUID != daemontest.DefaultUUID || len(m.Handles) != 1 || m.Handles[0].Kind != names.KindPosixShm {
			t.Fatalf("manifest = %+v", m)
		}
		mem, err := os.ReadFile(string(m.Handles[0].Data))
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Tensors) != len(d.Model.Tensors) {
			t.Fatalf("%d tensors in the manifest, %d in the checkpoint", len(m.Tensors), len(d.Model.Tensors))
		}
		for _, tn := range m.Tensors {
			gen, ok := d.Model.Tensor(0, tn.Name)
			if !ok || !bytes.Equal(mem[tn.Offset:tn.Offset+tn.Length], gen.Data()) {
				t.Fatalf("tensor %s: served bytes differ from the checkpoint's", tn.Name)
			}
		}
	})
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("folder %s left after the test: %v", dir, err)
	}
}

// TestCrashEndsRun: a crashed plugin makes Run return an error, and Edit
// reaches the daemon's options.
func TestCrashEndsRun(t *testing.T) {
	edited := false
	d := daemontest.Start(t, daemontest.Options{Edit: func(o *daemon.Options) { edited = true }})
	if !edited {
		t.Fatal("Edit was not called")
	}
	d.Plugin.Crash("simulated crash")
	if err := d.Wait(t); err == nil {
		t.Fatal("Run returned nil after the plugin crashed")
	}
	if err := d.Plugin.ExitError(); err == nil || err.Error() != "simulated crash" {
		t.Errorf("ExitError = %v", err)
	}
}
