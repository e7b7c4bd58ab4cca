package driver

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include "trampolines.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// DefaultLibrary is the driver library opened when no path is given: the
// library the NVIDIA driver installs (not the toolkit's libcudart).
const DefaultLibrary = "libcuda.so.1"

// Driver is an opened libcuda with every entry point resolved. It is safe
// for concurrent use; see the package doc for thread affinity. A Driver is
// never closed: unloading the driver while its threads run is unsafe, and
// the process holds it for its whole life.
type Driver struct {
	path string
	fn   [numSymbols]unsafe.Pointer
}

// Open loads the driver library (DefaultLibrary when path is "") with
// RTLD_NOW|RTLD_LOCAL and resolves every entry point. It fails with a
// *LoadError (wrapping sdk.ErrUnavailable) naming the library and every
// missing symbol. It does not call cuInit.
func Open(path string) (*Driver, error) {
	if path == "" {
		path = DefaultLibrary
	}
	runtime.LockOSThread() // dlerror is per thread
	defer runtime.UnlockOSThread()

	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	C.dlerror()
	h := C.dlopen(cpath, C.RTLD_NOW|C.RTLD_LOCAL)
	if h == nil {
		return nil, &LoadError{Library: path, Reason: dlerror()}
	}
	d := &Driver{path: path}
	var missing []string
	for s := symbol(0); s < numSymbols; s++ {
		cname := C.CString(s.String())
		p := C.dlsym(h, cname)
		C.free(unsafe.Pointer(cname))
		if p == nil && !s.optional() {
			missing = append(missing, s.String())
		}
		d.fn[s] = p
	}
	if d.fn[symDeviceGetUUIDV2] == nil && d.fn[symDeviceGetUUID] == nil {
		missing = append(missing, symDeviceGetUUIDV2.String()+" (or "+symDeviceGetUUID.String()+")")
	}
	if len(missing) > 0 {
		C.dlclose(h)
		return nil, &LoadError{Library: path, Missing: missing}
	}
	return d, nil
}

func dlerror() string {
	if e := C.dlerror(); e != nil {
		return C.GoString(e)
	}
	return "unknown dlopen error"
}

// Path returns the library path or name Open loaded.
func (d *Driver) Path() string { return d.path }

// HasUUIDV2 reports whether the driver exports cuDeviceGetUuid_v2.
func (d *Driver) HasUUIDV2() bool { return d.fn[symDeviceGetUUIDV2] != nil }

// HasUUIDV1 reports whether the driver exports the v1 cuDeviceGetUuid.
func (d *Driver) HasUUIDV1() bool { return d.fn[symDeviceGetUUID] != nil }

// check turns a CUresult into nil or an *Error naming the entry point.
func (d *Driver) check(s symbol, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	code := Result(r)
	return &Error{Func: s.String(), Code: code, Name: d.ErrorName(code), Desc: d.ErrorString(code)}
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
