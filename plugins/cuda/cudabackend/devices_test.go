package cudabackend

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
	"github.com/wcache/wcache/sdk"
)

// The fake's FAKECUDA_FASTEST_FIRST puts the MIG instance first in the
// default (FASTEST_FIRST) order, so that PCI_BUS_ID order differs.
const fastestFirst = "2,0,1"

func TestVisibleDevicesAndOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string // canonical UUIDs by ordinal
	}{
		{"all, PCI order", map[string]string{"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, []string{devA, devB, devM}},
		{"all, fastest first", nil, []string{devM, devA, devB}},
		{"indices index the fastest-first order", map[string]string{"CUDA_VISIBLE_DEVICES": "0,2"}, []string{devM, devB}},
		{"indices index the PCI order", map[string]string{"CUDA_VISIBLE_DEVICES": "0,2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, []string{devA, devM}},
		{"reordered indices", map[string]string{"CUDA_VISIBLE_DEVICES": "2,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, []string{devM, devB}},
		{"full GPU UUID", map[string]string{"CUDA_VISIBLE_DEVICES": devB}, []string{devB}},
		{"abbreviated GPU UUID and an index", map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-a1cec0da, 2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, []string{devB, devM}},
		{"MIG UUID", map[string]string{"CUDA_VISIBLE_DEVICES": "MIG-b2cec0da"}, []string{devM}},
		{"invalid index ends the list", map[string]string{"CUDA_VISIBLE_DEVICES": "1,7,0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, []string{devB}},
		{"unknown UUID ends the list", map[string]string{"CUDA_VISIBLE_DEVICES": "0,GPU-ffffffff,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, []string{devA}},
		{"ambiguous UUID prefix ends the list", map[string]string{"CUDA_VISIBLE_DEVICES": "2,GPU-a,0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, []string{devM}},
		{"GPU- prefix does not select a MIG instance", map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-b2cec0da,0"}, nil},
	} {
		for _, nvml := range []bool{true, false} {
			t.Run(tc.name+map[bool]string{true: "/nvml", false: "/no-nvml"}[nvml], func(t *testing.T) {
				// Absent unless the case sets them (t.Setenv restores them).
				for _, k := range []string{"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"} {
					t.Setenv(k, "")
					os.Unsetenv(k)
				}
				env := map[string]string{"FAKECUDA_FASTEST_FIRST": fastestFirst}
				for k, v := range tc.env {
					env[k] = v
				}
				cfg := fakeConfig(t, gputest.FakeOptions{NoManagement: !nvml, Env: env})
				b, err := New(cfg, nil)
				if tc.want == nil {
					if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "CUDA_ERROR_NO_DEVICE") {
						t.Fatalf("New = %v, want ErrUnavailable with CUDA_ERROR_NO_DEVICE", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				defer b.Close()
				if got := uuids(t, b); !slices.Equal(got, tc.want) {
					t.Fatalf("UUIDs by ordinal = %v, want %v", got, tc.want)
				}
			})
		}
	}
}

// uuids returns DeviceUUID for every ordinal, checking it against Devices.
func uuids(t *testing.T, b *Backend) []string {
	t.Helper()
	ctx := context.Background()
	devs, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, d := range devs {
		u, err := b.DeviceUUID(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		if u != d.UUID || d.Ordinal != i {
			t.Fatalf("DeviceUUID(%d) = %s, Devices lists %+v", i, u, d)
		}
		out = append(out, u)
	}
	if _, err := b.DeviceUUID(ctx, len(devs)); !errors.Is(err, sdk.ErrNoSuchDevice) {
		t.Fatalf("DeviceUUID(%d) = %v, want ErrNoSuchDevice", len(devs), err)
	}
	return out
}

func TestMetadataJoinedByUUIDNotIndex(t *testing.T) {
	// Ordinal 0 is physical device 2 (the MIG instance), ordinal 1 is 0.
	env := map[string]string{"CUDA_VISIBLE_DEVICES": "2,0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
	t.Run("nvml", func(t *testing.T) {
		b := newBackend(t, fakeConfig(t, gputest.FakeOptions{Env: env}))
		devs, err := b.Devices(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		want := []sdk.Device{
			{Ordinal: 0, UUID: devM, Name: "Fake NVML MIG 2", TotalMemory: fakeMemory, FreeMemory: fakeMemory - 3<<20, PCIBusID: "0000:30:00.0", Capability: "9.0"},
			{Ordinal: 1, UUID: devA, Name: "Fake NVML GPU 0", TotalMemory: fakeMemory, FreeMemory: fakeMemory - 3<<20, PCIBusID: "0000:10:00.0", Capability: "9.0"},
		}
		if !slices.Equal(devs, want) {
			t.Fatalf("Devices =\n%+v\nwant\n%+v", devs, want)
		}
		if !b.Runtime().HasNVML() {
			t.Fatal("HasNVML = false with the fake NVML")
		}
	})
	t.Run("driver fallback", func(t *testing.T) {
		b := newBackend(t, fakeConfig(t, gputest.FakeOptions{NoManagement: true, Env: env}))
		devs, err := b.Devices(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// Without NVML and before any worker holds a context, free memory
		// is unknown (0): listing devices creates no context.
		want := []sdk.Device{
			{Ordinal: 0, UUID: devM, Name: "Fake CUDA Device 2", TotalMemory: fakeMemory, FreeMemory: 0, PCIBusID: "0000:30:00.0", Capability: "9.0"},
			{Ordinal: 1, UUID: devA, Name: "Fake CUDA Device 0", TotalMemory: fakeMemory, FreeMemory: 0, PCIBusID: "0000:10:00.0", Capability: "9.0"},
		}
		if !slices.Equal(devs, want) {
			t.Fatalf("Devices =\n%+v\nwant\n%+v", devs, want)
		}
		if b.Runtime().HasNVML() {
			t.Fatal("HasNVML = true with NVML pointed at a missing file")
		}
	})
}

func TestMIGWithoutUUIDV2FallsBackToPhysicalUUID(t *testing.T) {
	// A driver without cuDeviceGetUuid_v2 and no NVML: v1 gives the MIG
	// instance's parent GPU, and nothing tells it is MIG.
	cfg := fakeConfig(t, gputest.FakeOptions{Variant: "nouuidv2", NoManagement: true, Env: map[string]string{"CUDA_VISIBLE_DEVICES": "MIG-b2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}})
	b := newBackend(t, cfg)
	if got := uuids(t, b); !slices.Equal(got, []string{devMPhysical}) {
		t.Fatalf("UUIDs = %v, want the physical GPU %s", got, devMPhysical)
	}
}
