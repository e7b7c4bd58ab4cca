// Package nvmlinfo reads device metadata (name, memory, PCI bus id, MIG
// mode, compute capability) from NVML through github.com/NVIDIA/go-nvml,
// looked up by device UUID.
//
// NVML enumerates every GPU of the machine in its own order and ignores
// CUDA_VISIBLE_DEVICES, so its indices are never used: the CUDA backend
// gets each visible device's UUID from the CUDA driver and asks NVML about
// that UUID. NVML is optional. When it is missing the backend falls back to
// what the CUDA driver reports.
//
// go-nvml binds NVML symbols lazily: calling an entry point the installed
// library lacks would abort the process. Every call here is therefore
// guarded by a symbol lookup first, and a missing one only leaves the
// corresponding field empty.
package nvmlinfo

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/wcache/wcache/plugins/cuda/gpuid"
)

// DefaultLibrary is the NVML library opened when no path is given.
const DefaultLibrary = "libnvidia-ml.so.1"

// Device is what NVML reports about one device. Zero fields are unknown.
type Device struct {
	Name        string
	TotalMemory uint64
	FreeMemory  uint64
	HaveMemory  bool
	PCIBusID    string // "0000:3b:00.0": 4-digit domain, lowercase hex
	MIG         bool   // the UUID names a MIG instance ("MIG-…")
	Capability  string // "9.0"
}

// Library is an initialised NVML. It is safe for concurrent use.
type Library struct {
	lib  nvml.Interface
	path string
}

// Open loads NVML from path (DefaultLibrary when "") and calls nvmlInit.
// The error says why NVML cannot be used; callers treat it as "no NVML".
func Open(path string) (*Library, error) {
	if path == "" {
		path = DefaultLibrary
	}
	lib := nvml.New(nvml.WithLibraryPath(path))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, fmt.Errorf("NVML: cannot load %s", path)
		}
		return nil, fmt.Errorf("NVML %s: nvmlInit: %s", path, lib.ErrorString(ret))
	}
	return &Library{lib: lib, path: path}, nil
}

// Path returns the library path or name Open loaded.
func (l *Library) Path() string { return l.path }

// Close calls nvmlShutdown.
func (l *Library) Close() error {
	if ret := l.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML %s: nvmlShutdown: %s", l.path, l.lib.ErrorString(ret))
	}
	return nil
}

// has reports whether the loaded library exports every named symbol.
func (l *Library) has(names ...string) bool {
	for _, n := range names {
		if l.lib.Extensions().LookupSymbol(n) != nil {
			return false
		}
	}
	return true
}

// hasAny reports whether the library exports at least one named symbol.
func (l *Library) hasAny(names ...string) bool {
	for _, n := range names {
		if l.has(n) {
			return true
		}
	}
	return false
}

// Lookup returns NVML's view of the device with the given UUID bytes, and
// false when NVML knows no such GPU or MIG instance. The UUID is tried as
// "GPU-…" first, then as "MIG-…": the match says which kind it is.
func (l *Library) Lookup(u gpuid.UUID) (Device, bool) {
	if !l.has("nvmlDeviceGetHandleByUUID") {
		return Device{}, false
	}
	var d Device
	h, ret := l.lib.DeviceGetHandleByUUID(u.Canonical(gpuid.KindGPU))
	if ret == nvml.SUCCESS {
		if l.has("nvmlDeviceIsMigDeviceHandle") {
			if mig, r := l.lib.DeviceIsMigDeviceHandle(h); r == nvml.SUCCESS {
				d.MIG = mig
			}
		}
	} else {
		h, ret = l.lib.DeviceGetHandleByUUID(u.Canonical(gpuid.KindMIG))
		if ret != nvml.SUCCESS {
			return Device{}, false
		}
		d.MIG = true
	}
	var parent nvml.Device
	if d.MIG && l.has("nvmlDeviceGetDeviceHandleFromMigDeviceHandle") {
		if p, r := l.lib.DeviceGetDeviceHandleFromMigDeviceHandle(h); r == nvml.SUCCESS {
			parent = p
		}
	}
	if l.has("nvmlDeviceGetName") {
		if name, r := l.lib.DeviceGetName(h); r == nvml.SUCCESS {
			d.Name = name
		}
	}
	if l.has("nvmlDeviceGetMemoryInfo") {
		if m, r := l.lib.DeviceGetMemoryInfo(h); r == nvml.SUCCESS {
			d.TotalMemory, d.FreeMemory, d.HaveMemory = m.Total, m.Free, true
		}
	}
	if l.hasAny("nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo") {
		d.PCIBusID = l.pciBusID(h)
		if d.PCIBusID == "" && parent != nil {
			d.PCIBusID = l.pciBusID(parent)
		}
	}
	if l.has("nvmlDeviceGetCudaComputeCapability") {
		d.Capability = l.capability(h)
		if d.Capability == "" && parent != nil {
			d.Capability = l.capability(parent)
		}
	}
	return d, true
}

func (l *Library) pciBusID(h nvml.Device) string {
	p, ret := l.lib.DeviceGetPciInfo(h)
	if ret != nvml.SUCCESS {
		return ""
	}
	var b strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	if id, ok := NormalizeBusID(b.String()); ok {
		return id
	}
	return FormatBusID(int(p.Domain), int(p.Bus), int(p.Device), 0)
}

func (l *Library) capability(h nvml.Device) string {
	major, minor, ret := l.lib.DeviceGetCudaComputeCapability(h)
	if ret != nvml.SUCCESS {
		return ""
	}
	return strconv.Itoa(major) + "." + strconv.Itoa(minor)
}
