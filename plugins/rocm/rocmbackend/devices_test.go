package rocmbackend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
	"github.com/wcache/wcache/sdk"
)

func uuids(t *testing.T, b *Backend) []string {
	t.Helper()
	devs, err := b.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, d := range devs {
		u, err := b.DeviceUUID(context.Background(), i)
		if err != nil || u != d.UUID {
			t.Fatalf("DeviceUUID(%d) = %q, %v; Devices says %q", i, u, err, d.UUID)
		}
		out = append(out, d.UUID)
	}
	return out
}

// TestVisibilityAsHIPAppliesIt: ROCR_VISIBLE_DEVICES first (indices or
// UUIDs of the physical list), then HIP_VISIBLE_DEVICES, or
// CUDA_VISIBLE_DEVICES when that is unset, as indices into what is left.
func TestVisibilityAsHIPAppliesIt(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want []string
	}{
		{nil, []string{devA, devB, devP0, devP1}},
		{map[string]string{"ROCR_VISIBLE_DEVICES": "2,0"}, []string{devP0, devA}},
		{map[string]string{"ROCR_VISIBLE_DEVICES": devB + ",3"}, []string{devB, devP1}},
		{map[string]string{"HIP_VISIBLE_DEVICES": "1"}, []string{devB}},
		{map[string]string{"CUDA_VISIBLE_DEVICES": "3,1"}, []string{devP1, devB}},
		{map[string]string{"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "1"}, []string{devA}},
		{map[string]string{"ROCR_VISIBLE_DEVICES": "1,2,3", "HIP_VISIBLE_DEVICES": "2,0"}, []string{devP1, devB}},
		{map[string]string{"HIP_VISIBLE_DEVICES": "1,7,0"}, []string{devB}},
	} {
		t.Run(fmt.Sprint(tc.env), func(t *testing.T) {
			b := newBackend(t, fakeConfig(t, gputest.FakeOptions{Env: tc.env}))
			if got := uuids(t, b); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("devices %v, want %v", got, tc.want)
			}
		})
	}
	_, err := New(fakeConfig(t, gputest.FakeOptions{Env: map[string]string{"HIP_VISIBLE_DEVICES": "9"}}), nil)
	if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "hipErrorNoDevice") {
		t.Errorf("no visible device: New = %v, want ErrUnavailable naming hipErrorNoDevice", err)
	}
}

// TestMetadataJoinedByUUIDOrPCINotIndex: fake amdsmi lists the devices in
// reverse order, and the partitions share a PCI address; each device must
// get its own metadata.
func TestMetadataJoinedByUUIDOrPCINotIndex(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprint("old amdsmi UUIDs=", old), func(t *testing.T) { metadataJoin(t, old) })
	}
}

func metadataJoin(t *testing.T, old bool) {
	{
		env := map[string]string{"ROCR_VISIBLE_DEVICES": "1,2,3", "FAKEAMDSMI_VRAM_USED": "1048576"}
		if old {
			env["FAKEAMDSMI_OLD_UUID"] = "1" // amdsmi UUIDs unrelated to HIP's: only the PCI join is left
		}
		b := newBackend(t, fakeConfig(t, gputest.FakeOptions{Env: env}))
		devs, err := b.Devices(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if devs[0].UUID != devB || devs[0].PCIBusID != "0000:c2:00.0" || !strings.Contains(devs[0].Name, "fake amdsmi") {
			t.Errorf("old=%v: device 0 = %+v, want %s at c2 named by amdsmi", old, devs[0], devB)
		}
		if devs[0].FreeMemory != fakeMemory-1<<20 || devs[0].TotalMemory != fakeMemory {
			t.Errorf("old=%v: device 0 memory %d/%d, want amdsmi's %d/%d", old, devs[0].FreeMemory, devs[0].TotalMemory, fakeMemory-1<<20, fakeMemory)
		}
		for _, d := range devs[1:] {
			if d.PCIBusID != "0000:21:00.0" {
				t.Errorf("partition %+v: want PCI 0000:21:00.0", d)
			}
			named := strings.Contains(d.Name, "fake amdsmi")
			if named == old {
				// Partitions share an address: with amdsmi's own UUIDs there is
				// nothing to join them by, so they keep HIP's name.
				t.Errorf("old=%v: partition %s named %q", old, d.UUID, d.Name)
			}
		}
	}
}

// TestWithoutAMDSMIMetadataFromHIPAndKFD: no amdsmi; a KFD fixture gives
// the gfx targets, joined by unique_id for the partitions and by the only
// node at an address for the whole GPU whose node has no unique_id.
func TestWithoutAMDSMIMetadataFromHIPAndKFD(t *testing.T) {
	cfg := fakeConfig(t, gputest.FakeOptions{NoManagement: true})
	writeKFDNode(t, cfg.SysfsRoot, 0, "simd_count 0\ngfx_target_version 0\n")
	writeKFDNode(t, cfg.SysfsRoot, 1, "gfx_target_version 90402\nlocation_id 49408\ndomain 0\nunique_id 1801979520617338022\n")
	writeKFDNode(t, cfg.SysfsRoot, 2, "gfx_target_version 90010\nlocation_id 49664\ndomain 0\nunique_id 0\n")
	writeKFDNode(t, cfg.SysfsRoot, 3, "gfx_target_version 90402\nlocation_id 8448\ndomain 0\nunique_id 8622704436554297345\n")
	writeKFDNode(t, cfg.SysfsRoot, 4, "gfx_target_version 90403\nlocation_id 8448\ndomain 0\nunique_id 8622704436554297346\n")
	b := newBackend(t, cfg)
	devs, err := b.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ uuid, gfx string }{{devA, "gfx942"}, {devB, "gfx90a"}, {devP0, "gfx942"}, {devP1, "gfx943"}}
	for i, w := range want {
		d := devs[i]
		if d.UUID != w.uuid || d.Capability != w.gfx || d.Name != "AMD Instinct MI300X (fake)" || d.TotalMemory != fakeMemory {
			t.Errorf("device %d = %+v, want %s %s with HIP's name and memory", i, d, w.uuid, w.gfx)
		}
		if d.FreeMemory != 0 {
			t.Errorf("device %d: free memory %d without amdsmi or a worker, want 0 (unknown)", i, d.FreeMemory)
		}
	}
	if b.Runtime().HasAMDSMI() {
		t.Error("amdsmi loaded from a missing path")
	}
}

// TestListingDevicesCreatesNoContext: Devices and DeviceUUID must not make
// HIP create a device context; the first allocation does.
func TestListingDevicesCreatesNoContext(t *testing.T) {
	ctxLog := filepath.Join(t.TempDir(), "contexts")
	b := newBackend(t, fakeConfig(t, gputest.FakeOptions{NoManagement: true, Env: map[string]string{"FAKEHIP_CONTEXT_LOG": ctxLog}}))
	uuids(t, b)
	if got, _ := os.ReadFile(ctxLog); len(got) != 0 {
		t.Fatalf("listing devices created contexts on devices %q", got)
	}
	if _, _, err := b.Allocate(context.Background(), 2, 4096); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(ctxLog); string(got) != "2\n" {
		t.Fatalf("after an allocation on device 2, contexts on %q", got)
	}
	devs, err := b.Devices(context.Background())
	if err != nil || devs[2].FreeMemory == 0 || devs[0].FreeMemory != 0 {
		t.Fatalf("free memory known only where a worker runs: %+v %v", devs, err)
	}
}

func TestComputeModesAndDuplicateUUIDsAreRefused(t *testing.T) {
	for mode, want := range map[string]string{"1": "exclusive compute mode", "3": "exclusive compute mode", "2": "Prohibited"} {
		t.Run("mode "+mode, func(t *testing.T) {
			_, err := New(fakeConfig(t, gputest.FakeOptions{Env: map[string]string{"FAKEHIP_COMPUTE_MODE": mode}}), nil)
			var cm *ComputeModeError
			if !errors.As(err, &cm) || !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), want) {
				t.Errorf("New = %v, want a ComputeModeError saying %q", err, want)
			}
		})
	}
	var logs bytes.Buffer
	_, err := New(fakeConfig(t, gputest.FakeOptions{Env: map[string]string{"FAKEHIP_DEVICES": "77aa00000000f001@21,77aa00000000f001@21"}}),
		hclog.New(&hclog.LoggerOptions{Output: &logs}))
	if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "both report UUID GPU-77aa00000000f001") {
		t.Errorf("two partitions with one UUID: New = %v", err)
	}
}

func TestDevicesWithoutUniqueIDAreRefused(t *testing.T) {
	_, err := New(fakeConfig(t, gputest.FakeOptions{Env: map[string]string{"FAKEHIP_DEVICES": "1901ead3a2ecd4a6,XX"}}), nil)
	if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "device 1") || !strings.Contains(err.Error(), "no unique id") {
		t.Fatalf("a device reporting GPU-XX: New = %v, want ErrUnavailable naming device 1 and the missing unique id", err)
	}
}
