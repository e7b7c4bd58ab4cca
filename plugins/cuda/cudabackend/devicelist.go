package cudabackend

import (
	"context"

	"github.com/wcache/wcache/sdk"
)

// Devices lists the devices this process sees, by ordinal. Name, memory
// and PCI bus id come from NVML when it knows the device's UUID, else from
// the CUDA driver. FreeMemory comes from NVML, else from cuMemGetInfo in
// the primary context a device worker already holds; without either it is
// 0, meaning unknown: listing devices never creates a context (a context
// costs hundreds of MiB of device memory and, on a GPU in
// Exclusive_Process mode, would lock the engine out).
func (rt *Runtime) Devices(ctx context.Context) ([]sdk.Device, error) {
	out := make([]sdk.Device, len(rt.devices))
	for i, d := range rt.devices {
		free, total, err := rt.memInfo(ctx, d)
		if err != nil {
			return nil, err
		}
		out[i] = sdk.Device{
			Ordinal:     d.ordinal,
			UUID:        d.canonical,
			Name:        d.name,
			TotalMemory: total,
			FreeMemory:  free,
			PCIBusID:    d.pciBusID,
			Capability:  d.capability,
		}
	}
	return out, nil
}

// memInfo returns the free and total bytes of a device (NVML's figures
// when it knows the device, see gpucore.Runtime.DeviceMemory).
func (rt *Runtime) memInfo(ctx context.Context, d deviceInfo) (free, total uint64, err error) {
	rt.mu.Lock()
	nv := rt.nvml
	rt.mu.Unlock()
	return rt.core.DeviceMemory(ctx, d.ordinal, d.totalMemory, func() (uint64, uint64, bool) {
		if nv == nil || !d.fromNVML {
			return 0, 0, false
		}
		m, ok := nv.Lookup(d.uuid)
		return m.FreeMemory, m.TotalMemory, ok && m.HaveMemory
	})
}
