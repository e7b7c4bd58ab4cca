package cudabackend

import "github.com/wcache/wcache/sdk"

// DeviceTable lists the devices this process sees, by ordinal, as found at
// open (gpucore.VendorRuntime): the canonical UUID ("GPU-…" or "MIG-…")
// after CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, exactly as an engine
// process with the same environment sees it; name, total memory and PCI
// bus id from NVML when it knows the device's UUID, else from the CUDA
// driver.
func (rt *Runtime) DeviceTable() []sdk.Device {
	out := make([]sdk.Device, len(rt.devices))
	for i, d := range rt.devices {
		out[i] = sdk.Device{Ordinal: d.ordinal, UUID: d.canonical, Name: d.name, TotalMemory: d.totalMemory,
			PCIBusID: d.pciBusID, Capability: d.capability}
	}
	return out
}

// MonitorMemory returns NVML's free and total bytes of a device; ok is
// false without NVML or when NVML does not know the device.
func (rt *Runtime) MonitorMemory(ordinal int) (free, total uint64, ok bool) {
	nv := rt.nvml.Get()
	d := rt.devices[ordinal]
	if nv == nil || !d.fromNVML {
		return 0, 0, false
	}
	m, ok := nv.Lookup(d.uuid)
	return m.FreeMemory, m.TotalMemory, ok && m.HaveMemory
}
