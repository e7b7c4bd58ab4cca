package hip

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/plugins/internal/dl"
	"github.com/wcache/wcache/plugins/rocm/internal/testkit/fakes"
	"github.com/wcache/wcache/sdk"
)

// fakeHIP builds the fake libamdhip64 with two devices into a fresh folder
// (a separate library instance per test).
func fakeHIP(t *testing.T) *Runtime {
	t.Helper()
	t.Setenv("FAKEHIP_DEVICES", "1901ead3a2ecd4a6@c1,2b6c1e0f7d3a9c55@c2")
	path, err := fakes.HIP(filepath.Join(".."), t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Init(); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestUUIDBytesAreASCII(t *testing.T) {
	r := fakeHIP(t)
	u, err := r.DeviceUUID(1)
	if err != nil || string(u[:]) != "2b6c1e0f7d3a9c55" {
		t.Fatalf("DeviceUUID(1) = %q, %v", u[:], err)
	}
	bus, err := r.DevicePCIBusID(0)
	if err != nil || bus != "0000:c1:00.0" {
		t.Fatalf("DevicePCIBusID(0) = %q, %v", bus, err)
	}
	if _, err := r.DeviceUUID(2); !errors.Is(err, sdk.ErrNoSuchDevice) {
		t.Fatalf("DeviceUUID(2) = %v, want ErrNoSuchDevice (hipErrorInvalidDevice)", err)
	}
}

// TestIPCRulesOfROCm: the flag must be hipIpcMemLazyEnablePeerAccess and
// an open in the exporting process is hipErrorInvalidContext.
func TestIPCRulesOfROCm(t *testing.T) {
	r := fakeHIP(t)
	if err := r.SetDevice(0); err != nil {
		t.Fatal(err)
	}
	p, err := r.Malloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	h, err := r.IpcGetMemHandle(p)
	if err != nil {
		t.Fatal(err)
	}
	var he *Error
	if _, err := r.IpcOpenMemHandle(h, 0); !errors.As(err, &he) || he.Code != ErrorInvalidValue {
		t.Fatalf("open with flags 0 = %v, want hipErrorInvalidValue", err)
	}
	if _, err := r.IpcOpenMemHandle(h, IPCMemLazyEnablePeerAccess); !errors.As(err, &he) || he.Code != ErrorInvalidContext {
		t.Fatalf("open in the exporting process = %v, want hipErrorInvalidContext", err)
	}
	if err := r.Free(p); err != nil {
		t.Fatal(err)
	}
	if r.Fatal() != nil {
		t.Fatal("a fatal error latched")
	}
}

func TestMissingLibrary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libamdhip64.so.7")
	_, err := Open(missing)
	var le *dl.LoadError
	if !errors.As(err, &le) || !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("Open(%s) = %v, want a LoadError", missing, err)
	}
}
