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
	attr := func(a driver.Attribute) (int, error) {
		v, err := drv.DeviceAttribute(a, d.dev)
		if err != nil {
			return 0, fmt.Errorf("device %d: attribute %d: %w", ordinal, a, err)
		}
		return v, nil
	}
	mode, err := attr(driver.AttrComputeMode)
	if err != nil {
		return d, err
	}
	d.computeMode = driver.ComputeMode(mode)
	major, err := attr(driver.AttrComputeCapabilityMajor)
	if err != nil {
		return d, err
	}
	minor, err := attr(driver.AttrComputeCapabilityMinor)
	if err != nil {
		return d, err
	}
	d.capability = strconv.Itoa(major) + "." + strconv.Itoa(minor)
	domain, err := attr(driver.AttrPCIDomainID)
	if err != nil {
		return d, err
	}
	bus, err := attr(driver.AttrPCIBusID)
	if err != nil {
		return d, err
	}
	slot, err := attr(driver.AttrPCIDeviceID)
	if err != nil {
		return d, err
	}
	d.pciBusID = nvmlinfo.FormatBusID(domain, bus, slot, 0)

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
