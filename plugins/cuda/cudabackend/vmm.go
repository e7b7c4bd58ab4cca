package cudabackend

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/sdk"
)

// vmmMapping is one VMM allocation as this process maps it: the physical
// allocation's handle (made by cuMemCreate or imported from a descriptor),
// mapped over the whole reservation at its base: read-write when this
// process created it, read-only when it imported it.
type vmmMapping struct {
	base driver.DevicePtr
	size uint64 // the reservation and mapping: a multiple of the granularity
	h    driver.MemHandle
}

// vmmTable holds the VMM mappings by base, so that Free and ExportFD find
// the handle of a base gpucore gives them. Safe for concurrent use.
type vmmTable struct {
	mu sync.Mutex
	m  map[gpucore.Ptr]vmmMapping
}

func (t *vmmTable) add(m vmmMapping) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[gpucore.Ptr(m.base)] = m
}

func (t *vmmTable) get(p gpucore.Ptr) (vmmMapping, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.m[p]
	return m, ok
}

// take removes and returns the mapping at base p.
func (t *vmmTable) take(p gpucore.Ptr) (vmmMapping, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.m[p]
	delete(t.m, p)
	return m, ok
}

// checkVMMSupport refuses, for cuda-vmm-fd, a device without virtual
// memory management or without POSIX descriptor export (attributes 102
// and 103), naming it: sdk.ErrUnavailable, so the plugin serves the reason.
func checkVMMSupport(drv *driver.Driver, devs []deviceInfo) error {
	for i, d := range devs {
		for _, attr := range []struct {
			a    driver.Attribute
			what string
		}{
			{driver.AttrVirtualMemoryManagementSupported, "virtual memory management (cuMemCreate, cuMemMap)"},
			{driver.AttrHandleTypePosixFDSupported, "exporting memory as POSIX file descriptors"},
		} {
			v, err := drv.DeviceAttribute(attr.a, d.dev)
			if err != nil {
				return fmt.Errorf("device %d (%s): query VMM support: %w", i, d.canonical, err)
			}
			if v == 0 {
				return sdk.Errorf(sdk.ErrUnavailable, "device %d (%s) does not support %s, which handle kind %s needs: serve %s (the default)",
					i, d.canonical, attr.what, HandleVMMFD, HandleIPC)
			}
		}
	}
	return nil
}

// granule rounds n up to the device's minimum VMM granularity.
func (rt *Runtime) granule(dev driver.Device, n uint64) (uint64, error) {
	g, err := rt.drv.MemGetAllocationGranularity(dev, driver.GranularityMinimum)
	if err != nil {
		return 0, err
	}
	if g == 0 {
		return 0, fmt.Errorf("cuMemGetAllocationGranularity: 0")
	}
	return (n + g - 1) / g * g, nil
}

// vmmMap reserves size bytes of address space, maps h over it and grants
// dev access (driver.MemAccessReadWrite, driver.MemAccessRead); on failure
// it undoes what it did (not h).
func (rt *Runtime) vmmMap(dev driver.Device, h driver.MemHandle, size uint64, access uint32) (vmmMapping, error) {
	drv := rt.drv
	va, err := drv.MemAddressReserve(size, 0)
	if err != nil {
		return vmmMapping{}, err
	}
	if err := drv.MemMap(va, size, 0, h); err != nil {
		return vmmMapping{}, errors.Join(err, drv.MemAddressFree(va, size))
	}
	if err := drv.MemSetAccess(va, size, dev, access); err != nil {
		return vmmMapping{}, errors.Join(err, drv.MemUnmap(va, size), drv.MemAddressFree(va, size))
	}
	m := vmmMapping{base: va, size: size, h: h}
	rt.vmm.add(m)
	return m, nil
}

// vmmNew rounds n up to the granularity of device ordinal, gets a
// physical allocation of that size from alloc (cuMemCreate, or the import
// of a descriptor) and maps it there with access (vmmMap); a failed
// mapping releases the allocation.
func (rt *Runtime) vmmNew(ordinal int, n uint64, access uint32, alloc func(dev driver.Device, size uint64) (driver.MemHandle, error)) (gpucore.Ptr, error) {
	dev := rt.devices[ordinal].dev
	size, err := rt.granule(dev, n)
	if err != nil {
		return 0, err
	}
	h, err := alloc(dev, size)
	if err != nil {
		return 0, err
	}
	m, err := rt.vmmMap(dev, h, size, access)
	if err != nil {
		return 0, errors.Join(err, rt.drv.MemRelease(h))
	}
	return gpucore.Ptr(m.base), nil
}

// vmmFree unmaps a mapping, frees its reservation and releases its handle.
// The memory itself is freed by the driver once no process holds a
// descriptor or a mapping of it.
func (rt *Runtime) vmmFree(m vmmMapping) error {
	drv := rt.drv
	return errors.Join(drv.MemUnmap(m.base, m.size), drv.MemAddressFree(m.base, m.size), drv.MemRelease(m.h))
}

// DescriptorKind is cuda-vmm-fd.
func (d cudaDriver) DescriptorKind() string { return HandleVMMFD }

// CreateFD allocates n bytes rounded up to the granularity with
// cuMemCreate (pinned device memory, exportable as a POSIX descriptor)
// and maps it read-write.
func (d cudaDriver) CreateFD(ordinal int, n uint64) (gpucore.Ptr, error) {
	return d.rt.vmmNew(ordinal, n, driver.MemAccessReadWrite, d.rt.drv.MemCreate)
}

// ExportFD exports the VMM memory at base p as a new descriptor
// (cuMemExportToShareableHandle).
func (d cudaDriver) ExportFD(p gpucore.Ptr) (*os.File, error) {
	m, ok := d.rt.vmm.get(p)
	if !ok {
		return nil, fmt.Errorf("export descriptor: no VMM mapping at %#x", uint64(p))
	}
	return d.rt.drv.MemExportFD(m.h)
}

// ImportFD imports the descriptor (cuMemImportFromShareableHandle) and
// maps size bytes, rounded up to the granularity, READ-ONLY on ordinal
// (cuMemSetAccess with CU_MEM_ACCESS_FLAGS_PROT_READ, as NVIDIA Dynamo's
// GPU memory service maps its imports): nothing this plugin does through
// an import writes, so a bug or a confused caller cannot alter the
// exporter's weights through it. A descriptor naming less memory fails in
// cuMemMap.
func (d cudaDriver) ImportFD(ordinal int, f *os.File, size uint64) (gpucore.Ptr, error) {
	return d.rt.vmmNew(ordinal, size, driver.MemAccessRead, func(driver.Device, uint64) (driver.MemHandle, error) { return d.rt.drv.MemImportFD(f) })
}
