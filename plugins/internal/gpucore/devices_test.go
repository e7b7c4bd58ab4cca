package gpucore_test

import (
	"errors"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// Devices takes the management library's memory figures for a device it
// knows (free never above total), else the free bytes of a running device
// worker, and 0 (unknown) without one: listing never starts a worker.
func TestDevicesMemoryComesFromTheMonitorElseARunningWorker(t *testing.T) {
	b := newFake(t, newSpace())
	rt := b.Runtime()
	rt.monitor = map[int][2]uint64{1: {900, 800}}
	devs, err := b.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 {
		t.Fatalf("Devices listed %d devices, want 2", len(devs))
	}
	if d := devs[0]; d.Ordinal != 0 || d.FreeMemory != 0 || d.TotalMemory != 64<<20 {
		t.Errorf("device 0 without monitor or worker: %+v, want free 0 (unknown), total %d", d, 64<<20)
	}
	if d := devs[1]; d.FreeMemory != 800 || d.TotalMemory != 800 {
		t.Errorf("device 1 known to the monitor: free %d total %d, want 800 and 800 (free clamped)", d.FreeMemory, d.TotalMemory)
	}
	if n := rt.drv.Calls("Setup"); n != 0 {
		t.Errorf("listing devices started %d device workers", n)
	}

	if _, _, err := b.Allocate(t.Context(), 0, 4<<20); err != nil {
		t.Fatal(err)
	}
	devs, err = b.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d := devs[0]; d.FreeMemory != 60<<20 || d.TotalMemory != 64<<20 {
		t.Errorf("device 0 with a running worker: free %d total %d, want %d of %d", d.FreeMemory, d.TotalMemory, 60<<20, 64<<20)
	}
}

func TestDeviceUUIDIsTheTableEntryAndUnknownOrdinalsAreNoSuchDevice(t *testing.T) {
	b := newFake(t, newSpace())
	devs, err := b.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if u, err := b.DeviceUUID(t.Context(), d.Ordinal); err != nil || u != d.UUID {
			t.Errorf("DeviceUUID(%d) = %q, %v; Devices lists %q", d.Ordinal, u, err, d.UUID)
		}
	}
	for _, ordinal := range []int{-1, len(devs)} {
		if _, err := b.DeviceUUID(t.Context(), ordinal); !errors.Is(err, sdk.ErrNoSuchDevice) {
			t.Errorf("DeviceUUID(%d) = %v, want ErrNoSuchDevice", ordinal, err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Devices(t.Context()); !errors.Is(err, sdk.ErrUnavailable) {
		t.Errorf("Devices after Close: %v, want ErrUnavailable", err)
	}
	if _, err := b.DeviceUUID(t.Context(), 0); !errors.Is(err, sdk.ErrUnavailable) {
		t.Errorf("DeviceUUID after Close: %v, want ErrUnavailable", err)
	}
}
