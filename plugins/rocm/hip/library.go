package hip

/*
#include "trampolines.h"
*/
import "C"

import (
	"unsafe"

	"github.com/wcache/wcache/plugins/internal/dl"
	"github.com/wcache/wcache/plugins/internal/fatal"
)

// DefaultLibraries are tried in order when no path is given: the sonames
// of ROCm 7, 6 and 5, the unversioned name, then the same under
// /opt/rocm/lib (a ROCm install whose lib folder is not on the loader's
// path).
var DefaultLibraries = []string{
	"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so",
	"/opt/rocm/lib/libamdhip64.so.7", "/opt/rocm/lib/libamdhip64.so.6", "/opt/rocm/lib/libamdhip64.so.5",
	"/opt/rocm/lib/libamdhip64.so",
}

// Runtime is an opened libamdhip64 with every entry point resolved. It is
// safe for concurrent use; see the package doc for thread affinity.
type Runtime struct {
	path  string
	fn    [numSymbols]unsafe.Pointer
	fatal fatal.Latch
}

// Open loads HIP from path (DefaultLibraries in turn when "") with
// RTLD_NOW|RTLD_LOCAL and resolves every entry point. It fails with a
// *dl.LoadError (wrapping sdk.ErrUnavailable) naming the library and
// every missing symbol. It does not initialise HIP (see Init).
func Open(path string) (*Runtime, error) {
	path, ptrs, err := dl.Load(path, DefaultLibraries, symbolNames[:], func(i int) bool { return symbol(i).optional() })
	if err != nil {
		return nil, err
	}
	r := &Runtime{path: path}
	copy(r.fn[:], ptrs)
	return r, nil
}

// Path returns the library Open loaded.
func (r *Runtime) Path() string { return r.path }

// check turns a hipError_t into nil or an *Error naming the entry point,
// latching fatal codes (see Code.Fatal).
func (r *Runtime) check(s symbol, code C.hipError_t) error {
	if code == 0 { // no method values to build on the common path
		return nil
	}
	return dl.Check(s.String(), Code(code), r.ErrorName, r.ErrorString, Code.Fatal, &r.fatal)
}

// ErrorName returns hipGetErrorName for a code.
func (r *Runtime) ErrorName(c Code) string {
	if p := C.wh_error_text(r.fn[symGetErrorName], C.hipError_t(c)); p != nil {
		return C.GoString(p)
	}
	return ""
}

// ErrorString returns hipGetErrorString for a code.
func (r *Runtime) ErrorString(c Code) string {
	if p := C.wh_error_text(r.fn[symGetErrorString], C.hipError_t(c)); p != nil {
		return C.GoString(p)
	}
	return ""
}

// Fatal returns the first fatal error (see Code.Fatal) any call returned,
// or nil. Once it is set the process cannot use the GPU again.
func (r *Runtime) Fatal() *Error {
	if e, ok := r.fatal.Err().(*Error); ok {
		return e
	}
	return nil
}

// FatalDone is closed when the first fatal error happens.
func (r *Runtime) FatalDone() <-chan struct{} { return r.fatal.Done() }
