package driver

/*
#include <stdlib.h>
#include "trampolines.h"
*/
import "C"

import (
	"unsafe"

	"github.com/wcache/wcache/plugins/internal/dl"
	"github.com/wcache/wcache/plugins/internal/fatal"
)

// DefaultLibrary is the driver library opened when no path is given: the
// library the NVIDIA driver installs (not the toolkit's libcudart).
const DefaultLibrary = "libcuda.so.1"

// Driver is an opened libcuda with every entry point resolved. It is safe
// for concurrent use; see the package doc for thread affinity. A Driver is
// never closed: unloading the driver while its threads run is unsafe, and
// the process holds it for its whole life.
type Driver struct {
	path     string
	fn       [numSymbols]unsafe.Pointer
	resolver string   // how the entry points were found; see Resolver
	fellBack []string // symbols cuGetProcAddress did not give, found by dlsym
	sticky   fatal.Latch
}

// Resolver names how Open found the entry points: "cuGetProcAddress_v2"
// (CUDA 12.0+ drivers) or "cuGetProcAddress" (11.3+), both asked for the
// CUDA 12.0 ABI (version 12000, default flags), or "dlsym" of the exported
// _v2 names when the driver has neither.
const (
	ResolverProcAddressV2 = "cuGetProcAddress_v2"
	ResolverProcAddress   = "cuGetProcAddress"
	ResolverDlsym         = "dlsym"
)

// Open loads the driver library (DefaultLibrary when path is "") with
// RTLD_NOW|RTLD_LOCAL and resolves every entry point: through
// cuGetProcAddress_v2 (or cuGetProcAddress) pinned to the CUDA 12.0 ABI
// where the driver has it, so that a newer driver (CUDA 13) still hands
// out the signatures this package was written for, falling back to dlsym
// of the exported versioned names per symbol. It fails with a *LoadError
// (wrapping sdk.ErrUnavailable) naming the library and every missing
// symbol. It does not call cuInit.
func Open(path string) (*Driver, error) {
	if path == "" {
		path = DefaultLibrary
	}
	h, err := dl.Open(path)
	if err != nil {
		return nil, err
	}
	d := &Driver{path: path, resolver: ResolverDlsym}
	procV2 := lookup(h, ResolverProcAddressV2)
	procV1 := lookup(h, ResolverProcAddress)
	switch {
	case procV2 != nil:
		d.resolver = ResolverProcAddressV2
	case procV1 != nil:
		d.resolver = ResolverProcAddress
	}
	var missing []string
	for s := symbol(0); s < numSymbols; s++ {
		e := entries[s]
		var p unsafe.Pointer
		if d.resolver != ResolverDlsym {
			p = procAddress(procV2, procV1, e.base, e.version)
			if p == nil {
				d.fellBack = append(d.fellBack, e.export)
			}
		}
		if p == nil {
			p = lookup(h, e.export)
		}
		if p == nil && !s.optional() {
			missing = append(missing, s.String())
		}
		d.fn[s] = p
	}
	if d.fn[symDeviceGetUUIDV2] == d.fn[symDeviceGetUUID] {
		// A driver older than 11.4 answers cuGetProcAddress("cuDeviceGetUuid",
		// 12000) with v1, the newest it has: that is no v2.
		d.fn[symDeviceGetUUIDV2] = nil
	}
	if d.fn[symDeviceGetUUIDV2] == nil && d.fn[symDeviceGetUUID] == nil {
		missing = append(missing, symDeviceGetUUIDV2.String()+" (or "+symDeviceGetUUID.String()+")")
	}
	if len(missing) > 0 {
		h.Close()
		return nil, &LoadError{Library: path, Missing: missing}
	}
	return d, nil
}

// lookup is dlsym; nil when the library lacks the symbol.
func lookup(h *dl.Library, name string) unsafe.Pointer { return h.Sym(name) }

// procAddress asks the driver for base at an ABI version with default
// flags (CU_GET_PROC_ADDRESS_DEFAULT); nil when it has no such entry point.
func procAddress(v2, v1 unsafe.Pointer, base string, version int) unsafe.Pointer {
	cname := C.CString(base)
	defer C.free(unsafe.Pointer(cname))
	var p unsafe.Pointer
	var r C.CUresult
	if v2 != nil {
		var status C.int
		r = C.wc_get_proc_address_v2(v2, cname, &p, C.int(version), 0, &status)
		if status != 0 {
			return nil
		}
	} else {
		r = C.wc_get_proc_address(v1, cname, &p, C.int(version), 0)
	}
	if r != 0 {
		return nil
	}
	return p
}

// Path returns the library path or name Open loaded.
func (d *Driver) Path() string { return d.path }

// Resolver returns how Open found the entry points (ResolverProcAddressV2,
// ResolverProcAddress or ResolverDlsym).
func (d *Driver) Resolver() string { return d.resolver }

// FellBack lists the symbols the driver's cuGetProcAddress did not give at
// the pinned ABI and Open found with dlsym instead; empty normally.
func (d *Driver) FellBack() []string { return d.fellBack }

// HasUUIDV2 reports whether the driver exports cuDeviceGetUuid_v2.
func (d *Driver) HasUUIDV2() bool { return d.fn[symDeviceGetUUIDV2] != nil }

// HasUUIDV1 reports whether the driver exports the v1 cuDeviceGetUuid.
func (d *Driver) HasUUIDV1() bool { return d.fn[symDeviceGetUUID] != nil }

// check turns a CUresult into nil or an *Error naming the entry point,
// latching sticky codes (see Result.Sticky).
func (d *Driver) check(s symbol, r C.CUresult) error {
	if r == 0 { // no method values to build on the common path
		return nil
	}
	return dl.Check(s.String(), Result(r), d.ErrorName, d.ErrorString, Result.Sticky, &d.sticky)
}

// ErrorName returns cuGetErrorName for a code, or "" when the driver does
// not know it.
func (d *Driver) ErrorName(r Result) string {
	var s *C.char
	if C.wc_get_error_text(d.fn[symGetErrorName], C.CUresult(r), &s) != 0 || s == nil {
		return ""
	}
	return C.GoString(s)
}

// ErrorString returns cuGetErrorString for a code, or "" when unknown.
func (d *Driver) ErrorString(r Result) string {
	var s *C.char
	if C.wc_get_error_text(d.fn[symGetErrorString], C.CUresult(r), &s) != 0 || s == nil {
		return ""
	}
	return C.GoString(s)
}
