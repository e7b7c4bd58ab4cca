// Package amdsmi reads AMD GPU metadata (name, memory, PCI address, UUID)
// from the AMD SMI library (libamd_smi.so), loaded at run time. The Go
// module github.com/ROCm/amdsmi (goamdsmi) is not on the module proxy and
// its cgo wrapper would need the ROCm headers at build time, so the C
// library is bound by dlopen like HIP (plugins/internal/dl). Only scalar
// entry points and the leading field of amdsmi_asic_info_t (market_name,
// first in every ROCm 6.x layout) are used.
//
// amdsmi lists every GPU of the machine, ignoring ROCR_VISIBLE_DEVICES and
// HIP_VISIBLE_DEVICES, in an order of its own: its devices are joined to
// HIP's by PCI address or UUID (Lookup), never by index.
package amdsmi

/*
#include <stdlib.h>
#include "trampolines.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/wcache/wcache/plugins/internal/dl"
	"github.com/wcache/wcache/sdk"
)

// DefaultLibraries are tried in order when no path is given.
var DefaultLibraries = []string{"libamd_smi.so", "/opt/rocm/lib/libamd_smi.so"}

// amdsmi.h constants.
const (
	initAMDGPUs  = 1 << 1 // AMDSMI_INIT_AMD_GPUS
	memTypeVRAM  = 0      // AMDSMI_MEM_TYPE_VRAM
	uuidSize     = 64     // ≥ AMDSMI_GPU_UUID_SIZE (38)
	asicInfoSize = 4096   // ≥ sizeof(amdsmi_asic_info_t) of any 6.x release
	nameMax      = 256    // market_name
)

const (
	symInit = iota
	symShutDown
	symSocketHandles
	symProcessorHandles
	symBDF
	symUUID
	symMemoryTotal
	symMemoryUsage
	symAsicInfo
	symStatusString
	numSymbols
)

var symbolNames = []string{
	"amdsmi_init", "amdsmi_shut_down", "amdsmi_get_socket_handles", "amdsmi_get_processor_handles",
	"amdsmi_get_gpu_device_bdf", "amdsmi_get_gpu_device_uuid", "amdsmi_get_gpu_memory_total",
	"amdsmi_get_gpu_memory_usage", "amdsmi_get_gpu_asic_info", "amdsmi_status_code_to_string",
}

// Device is what amdsmi reports about one GPU (or partition).
type Device struct {
	BusID string // "0000:c1:00.0"
	UUID  string // as amdsmi spells it; "GPU-…" in current releases
	Name  string // market name, "" when unknown
	h     unsafe.Pointer
}

// Library is an initialised amdsmi. It is safe for concurrent use.
type Library struct {
	path    string
	fn      []unsafe.Pointer
	mu      sync.Mutex
	closed  bool
	devices []Device
}

// Open loads amdsmi (DefaultLibraries when path is ""), initialises it for
// AMD GPUs and lists the devices. A missing library or symbol, or a failed
// amdsmi_init, is an error wrapping sdk.ErrUnavailable; the ROCm backend
// then falls back to the KFD topology.
func Open(path string) (*Library, error) {
	path, fn, err := dl.Load(path, DefaultLibraries, symbolNames, nil)
	if err != nil {
		return nil, err
	}
	l := &Library{path: path, fn: fn}
	if err := l.check("amdsmi_init", C.ws_init(fn[symInit], initAMDGPUs)); err != nil {
		return nil, fmt.Errorf("%w: %v", sdk.ErrUnavailable, err)
	}
	if l.devices, err = l.list(); err != nil {
		C.ws_void_call(fn[symShutDown])
		return nil, err
	}
	return l, nil
}

// Path returns the library Open loaded.
func (l *Library) Path() string { return l.path }

func (l *Library) check(what string, s C.amdsmi_status_t) error {
	if s == 0 {
		return nil
	}
	var text *C.char
	desc := ""
	if C.ws_status_string(l.fn[symStatusString], s, &text) == 0 && text != nil {
		desc = ": " + C.GoString(text)
	}
	return fmt.Errorf("%s: amdsmi status %d%s", what, int(s), desc)
}

// list reads every processor of every socket.
func (l *Library) list() ([]Device, error) {
	var n C.uint32_t
	if err := l.check("amdsmi_get_socket_handles", C.ws_socket_handles(l.fn[symSocketHandles], &n, nil)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	sockets := make([]unsafe.Pointer, n)
	csockets := (*unsafe.Pointer)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(unsafe.Pointer(nil)))))
	defer C.free(unsafe.Pointer(csockets))
	if err := l.check("amdsmi_get_socket_handles", C.ws_socket_handles(l.fn[symSocketHandles], &n, csockets)); err != nil {
		return nil, err
	}
	copy(sockets, unsafe.Slice(csockets, n))
	var out []Device
	for _, s := range sockets {
		var m C.uint32_t
		if err := l.check("amdsmi_get_processor_handles", C.ws_processor_handles(l.fn[symProcessorHandles], s, &m, nil)); err != nil {
			return nil, err
		}
		if m == 0 {
			continue
		}
		handles := (*unsafe.Pointer)(C.calloc(C.size_t(m), C.size_t(unsafe.Sizeof(unsafe.Pointer(nil)))))
		err := l.check("amdsmi_get_processor_handles", C.ws_processor_handles(l.fn[symProcessorHandles], s, &m, handles))
		hs := append([]unsafe.Pointer(nil), unsafe.Slice(handles, m)...)
		C.free(unsafe.Pointer(handles))
		if err != nil {
			return nil, err
		}
		for _, h := range hs {
			out = append(out, l.describe(h))
		}
	}
	return out, nil
}

// describe reads one processor; fields it cannot read stay empty.
func (l *Library) describe(h unsafe.Pointer) Device {
	d := Device{h: h}
	var bdf C.uint64_t
	if C.ws_bdf(l.fn[symBDF], h, &bdf) == 0 {
		b := uint64(bdf)
		d.BusID = fmt.Sprintf("%04x:%02x:%02x.%d", b>>16, (b>>8)&0xff, (b>>3)&0x1f, b&0x7)
	}
	buf := (*C.char)(C.calloc(uuidSize, 1))
	n := C.unsigned(uuidSize)
	if C.ws_uuid(l.fn[symUUID], h, &n, buf) == 0 {
		d.UUID = strings.TrimSpace(C.GoString(buf))
	}
	C.free(unsafe.Pointer(buf))
	info := C.calloc(asicInfoSize, 1)
	if C.ws_asic_info(l.fn[symAsicInfo], h, info) == 0 {
		d.Name = strings.TrimSpace(C.GoStringN((*C.char)(info), C.int(strnlen(info, nameMax))))
	}
	C.free(info)
	return d
}

func strnlen(p unsafe.Pointer, max int) int {
	b := unsafe.Slice((*byte)(p), max)
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return max
}

// Devices returns the devices amdsmi listed at Open.
func (l *Library) Devices() []Device { return append([]Device(nil), l.devices...) }

// Lookup returns the device of a HIP device: the one whose UUID equals
// uuid (canonical "GPU-…", compared without case), else the only one at
// busID. Several at busID (partitions) and no UUID match: ok is false.
func (l *Library) Lookup(uuid, busID string) (d Device, how string, ok bool) {
	for _, d := range l.devices {
		if uuid != "" && strings.EqualFold(d.UUID, uuid) {
			return d, "uuid", true
		}
	}
	var found []Device
	for _, d := range l.devices {
		if d.BusID == busID {
			found = append(found, d)
		}
	}
	if len(found) == 1 {
		return found[0], "pci", true
	}
	return Device{}, "", false
}

// Memory returns the VRAM total and used bytes of d, now.
func (l *Library) Memory(d Device) (total, used uint64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, 0, fmt.Errorf("amdsmi closed")
	}
	var t, u C.uint64_t
	if err := l.check("amdsmi_get_gpu_memory_total", C.ws_memory(l.fn[symMemoryTotal], d.h, memTypeVRAM, &t)); err != nil {
		return 0, 0, err
	}
	if err := l.check("amdsmi_get_gpu_memory_usage", C.ws_memory(l.fn[symMemoryUsage], d.h, memTypeVRAM, &u)); err != nil {
		return 0, 0, err
	}
	return uint64(t), uint64(u), nil
}

// Close shuts amdsmi down (amdsmi_shut_down). It is idempotent.
func (l *Library) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return l.check("amdsmi_shut_down", C.ws_void_call(l.fn[symShutDown]))
}
