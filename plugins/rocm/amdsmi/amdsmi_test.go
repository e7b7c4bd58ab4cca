package amdsmi

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/plugins/rocm/internal/testkit/fakes"
	"github.com/wcache/wcache/sdk"
)

func fakeSMI(t *testing.T, env map[string]string) string {
	t.Helper()
	t.Setenv("FAKEHIP_DEVICES", "1901ead3a2ecd4a6@c1,77aa00000000f001@21,77aa00000000f002@21")
	t.Setenv("FAKEHIP_MEMORY", "1073741824")
	for k, v := range env {
		t.Setenv(k, v)
	}
	path, err := fakes.AMDSMI(filepath.Join(".."), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDevicesAndLookup(t *testing.T) {
	l, err := Open(fakeSMI(t, map[string]string{"FAKEAMDSMI_VRAM_USED": "4096"}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	devs := l.Devices()
	if len(devs) != 3 || devs[0].UUID != "GPU-77aa00000000f002" || devs[2].BusID != "0000:c1:00.0" {
		t.Fatalf("Devices = %+v, want the fake's three in its reversed order", devs)
	}
	if d, how, ok := l.Lookup("GPU-1901EAD3A2ECD4A6", "0000:ff:00.0"); !ok || how != "uuid" || d.BusID != "0000:c1:00.0" {
		t.Errorf("Lookup by UUID = %+v %q %v", d, how, ok)
	}
	if d, how, ok := l.Lookup("", "0000:c1:00.0"); !ok || how != "pci" || d.Name == "" {
		t.Errorf("Lookup by the only device at c1 = %+v %q %v", d, how, ok)
	}
	if _, _, ok := l.Lookup("GPU-0000000000000000", "0000:21:00.0"); ok {
		t.Error("two partitions at 21 were joined by address")
	}
	total, used, err := l.Memory(devs[0])
	if err != nil || total != 1<<30 || used != 4096 {
		t.Errorf("Memory = %d %d %v", total, used, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Memory(devs[0]); err == nil {
		t.Error("Memory after Close succeeded")
	}
}

func TestInitFailureIsUnavailable(t *testing.T) {
	if _, err := Open(fakeSMI(t, map[string]string{"FAKEAMDSMI_INIT_ERROR": "32"})); !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("a failing amdsmi_init: Open = %v, want ErrUnavailable", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "libamd_smi.so")); !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("a missing library: Open = %v", err)
	}
}
