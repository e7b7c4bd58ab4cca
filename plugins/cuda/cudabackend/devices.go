package cudabackend

import (
	"fmt"
	"strconv"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/cuda/gpuid"
	"github.com/wcache/wcache/plugins/cuda/nvmlinfo"
)

// deviceInfo is what the Runtime learns about a visible device at open.
type deviceInfo struct {
	ordinal     int
	dev         driver.Device
	uuid        gpuid.UUID
	kind        gpuid.Kind
	canonical   string // "GPU-…" or "MIG-…"
	name        string
	totalMemory uint64
	pciBusID    string
	capability  string
	fromNVML    bool // NVML knew the UUID
	kindSource  string
	computeMode driver.ComputeMode
}

// enumerate lists the devices the CUDA driver shows this process (after
// CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER) and joins each to NVML by
// UUID when nv is not nil.
func enumerate(drv *driver.Driver, nv *nvmlinfo.Library) ([]deviceInfo, error) {
	n, err := drv.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("count devices: %w", err)
	}
	out := make([]deviceInfo, 0, n)
	for ordinal := range n {
		d, err := describe(drv, nv, ordinal)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// describe reads one device. Identity always comes from the CUDA driver;
// NVML only adds metadata, matched by UUID.
func describe(drv *driver.Driver, nv *nvmlinfo.Library, ordinal int) (deviceInfo, error) {
	d := deviceInfo{ordinal: ordinal}
	var err error
	if d.dev, err = drv.DeviceGet(ordinal); err != nil {
		return d, fmt.Errorf("device %d: %w", ordinal, err)
	}
	if d.uuid, err = drv.DeviceUUID(d.dev); err != nil {
		return d, fmt.Errorf("device %d: UUID: %w", ordinal, err)
	}
	if d.name, err = drv.DeviceName(d.dev); err != nil {
		return d, fmt.Errorf("device %d: name: %w", ordinal, err)
	}
	if d.totalMemory, err = drv.DeviceTotalMem(d.dev); err != nil {
		return d, fmt.Errorf("device %d: total memory: %w", ordinal, err)
	}
	// The attributes, read in this order: compute mode, compute
	// capability, PCI address.
	attr := map[driver.Attribute]int{}
	for _, a := range []driver.Attribute{driver.AttrComputeMode, driver.AttrComputeCapabilityMajor, driver.AttrComputeCapabilityMinor,
		driver.AttrPCIDomainID, driver.AttrPCIBusID, driver.AttrPCIDeviceID} {
		if attr[a], err = drv.DeviceAttribute(a, d.dev); err != nil {
			return d, fmt.Errorf("device %d: attribute %d: %w", ordinal, a, err)
		}
	}
	d.computeMode = driver.ComputeMode(attr[driver.AttrComputeMode])
	d.capability = strconv.Itoa(attr[driver.AttrComputeCapabilityMajor]) + "." + strconv.Itoa(attr[driver.AttrComputeCapabilityMinor])
	d.pciBusID = nvmlinfo.FormatBusID(attr[driver.AttrPCIDomainID], attr[driver.AttrPCIBusID], attr[driver.AttrPCIDeviceID], 0)

	d.kind, d.kindSource = gpuid.KindGPU, "default"
	if nv != nil {
		if m, ok := nv.Lookup(d.uuid); ok {
			d.fromNVML = true
			d.kindSource = "nvml"
			if m.MIG {
				d.kind = gpuid.KindMIG
			}
			if m.Name != "" {
				d.name = m.Name
			}
			if m.HaveMemory && m.TotalMemory > 0 {
				d.totalMemory = m.TotalMemory
			}
			if m.PCIBusID != "" {
				d.pciBusID = m.PCIBusID
			}
		}
	}
	if !d.fromNVML && drv.HasUUIDV2() && drv.HasUUIDV1() {
		// Without NVML: on CUDA 11/12 drivers v1 returns the physical GPU
		// UUID and v2 the MIG instance's, so they differ exactly in MIG.
		phys, err := drv.DeviceUUIDV1(d.dev)
		if err != nil {
			return d, fmt.Errorf("device %d: physical UUID: %w", ordinal, err)
		}
		d.kindSource = "cuDeviceGetUuid v1/v2"
		if phys != d.uuid {
			d.kind = gpuid.KindMIG
		}
	}
	d.canonical = d.uuid.Canonical(d.kind)
	return d, nil
}
