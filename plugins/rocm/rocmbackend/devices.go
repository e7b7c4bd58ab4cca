package rocmbackend

import (
	"fmt"

	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/plugins/rocm/amdid"
	"github.com/wcache/wcache/plugins/rocm/amdsmi"
	"github.com/wcache/wcache/plugins/rocm/hip"
	"github.com/wcache/wcache/plugins/rocm/kfd"
	"github.com/wcache/wcache/sdk"
)

// deviceInfo is what the Runtime learns about a visible device at open.
type deviceInfo struct {
	ordinal     int
	uuid        string // canonical "GPU-" + 16 hex digits
	name        string
	totalMemory uint64
	pciBusID    string // sysfs form, "0000:c1:00.0"
	gfx         string // "gfx942"; "" unknown
	computeMode hip.ComputeMode
	smi         *amdsmi.Device // nil: amdsmi absent or no match
	smiJoin     string         // "uuid", "pci" or ""
	kfdJoin     string         // "unique_id", "location_id" or ""
}

// enumerate lists the devices HIP shows this process (after
// ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES) and
// joins each to amdsmi (smi may be nil) and to the KFD nodes by UUID or
// PCI address, never by index. Only device queries that need no context
// are made.
func enumerate(h *hip.Runtime, smi *amdsmi.Library, nodes []kfd.Node) ([]deviceInfo, error) {
	n, err := h.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("count devices: %w", err)
	}
	out := make([]deviceInfo, 0, n)
	for ordinal := range n {
		d, err := describe(h, ordinal)
		if err != nil {
			return nil, err
		}
		if smi != nil {
			if m, how, ok := smi.Lookup(d.uuid, d.pciBusID); ok {
				d.smi, d.smiJoin = &m, how
				if m.Name != "" {
					d.name = m.Name
				}
			}
		}
		if node, how, ok := kfd.Match(nodes, d.uuid, d.pciBusID); ok {
			d.gfx, d.kfdJoin = node.GfxTarget(), how
		}
		out = append(out, d)
	}
	return out, nil
}

// describe reads one device from HIP.
func describe(h *hip.Runtime, ordinal int) (deviceInfo, error) {
	d := deviceInfo{ordinal: ordinal}
	dev, err := h.DeviceGet(ordinal)
	if err != nil {
		return d, fmt.Errorf("device %d: %w", ordinal, err)
	}
	raw, err := h.DeviceUUID(dev)
	if err != nil {
		return d, fmt.Errorf("device %d: UUID: %w", ordinal, err)
	}
	if d.uuid, err = amdid.FromHIP(raw); err != nil {
		return d, fmt.Errorf("%w: device %d: %v", sdk.ErrUnavailable, ordinal, err)
	}
	if d.name, err = h.DeviceName(dev); err != nil {
		return d, fmt.Errorf("device %d: name: %w", ordinal, err)
	}
	if d.totalMemory, err = h.DeviceTotalMem(dev); err != nil {
		return d, fmt.Errorf("device %d: total memory: %w", ordinal, err)
	}
	bus, err := h.DevicePCIBusID(dev)
	if err != nil {
		return d, fmt.Errorf("device %d: PCI bus id: %w", ordinal, err)
	}
	if d.pciBusID = staging.SysfsBusID(bus); d.pciBusID == "" {
		d.pciBusID = bus
	}
	mode, err := h.DeviceAttribute(hip.AttrComputeMode, dev)
	if err != nil {
		return d, fmt.Errorf("device %d: compute mode: %w", ordinal, err)
	}
	d.computeMode = hip.ComputeMode(mode)
	return d, nil
}

// ComputeModeError reports a device whose compute mode keeps the backend
// from serving it (see computeModeError). It wraps sdk.ErrUnavailable.
type ComputeModeError = gpucore.ComputeModeError[hip.ComputeMode]

// computeModeError is the error of d's compute mode, Prohibited or an
// exclusive one.
func computeModeError(d deviceInfo) *ComputeModeError {
	why := fmt.Sprintf("an exclusive compute mode (%d): the context wcache holds to keep the weights "+
		"resident would lock every inference engine out of the GPU; set the GPU to the default compute mode (see docs/rocm-backend.md)",
		int(d.computeMode))
	if d.computeMode == hip.ComputeModeProhibited {
		why = "compute mode Prohibited: no process may use it"
	}
	return &ComputeModeError{Ordinal: d.ordinal, UUID: d.uuid, Mode: d.computeMode, Why: why}
}

// checkDevices refuses devices no context of ours may use without harming
// the engines (Prohibited, Exclusive, Exclusive_Process; ROCm has no MPS),
// and visible devices that share a UUID (partitions on a driver that does
// not make their unique_id distinct): their daemons would share one path.
func checkDevices(devs []deviceInfo) error {
	seen := map[string]int{}
	for _, d := range devs {
		if d.computeMode != hip.ComputeModeDefault {
			return computeModeError(d)
		}
		if o, dup := seen[d.uuid]; dup {
			return fmt.Errorf("%w: devices %d and %d both report UUID %s (partitions of one GPU whose driver gives them one "+
				"unique_id); a daemon path is keyed by UUID, so neither can be served (see docs/rocm-backend.md)",
				sdk.ErrUnavailable, o, d.ordinal, d.uuid)
		}
		seen[d.uuid] = d.ordinal
	}
	return nil
}

// DeviceTable lists the devices this process sees, by ordinal, as found at
// open (gpucore.VendorRuntime): the canonical UUID ("GPU-" + 16 hex
// digits) after ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES and
// CUDA_VISIBLE_DEVICES, exactly as an engine process with the same
// environment sees it; the name from amdsmi when it knows the device
// (joined by UUID or PCI address), else from HIP; Capability the gfx
// target from the KFD topology ("" when unknown).
func (rt *Runtime) DeviceTable() []sdk.Device {
	out := make([]sdk.Device, len(rt.devices))
	for i, d := range rt.devices {
		out[i] = sdk.Device{Ordinal: d.ordinal, UUID: d.uuid, Name: d.name, TotalMemory: d.totalMemory,
			PCIBusID: d.pciBusID, Capability: d.gfx}
	}
	return out
}

// MonitorMemory returns amdsmi's free and total bytes of a device; ok is
// false without amdsmi, when it does not know the device or fails.
func (rt *Runtime) MonitorMemory(ordinal int) (free, total uint64, ok bool) {
	smi := rt.smi.Get()
	d := rt.devices[ordinal]
	if smi == nil || d.smi == nil {
		return 0, 0, false
	}
	t, u, err := smi.Memory(*d.smi)
	return t - min(u, t), t, err == nil
}
