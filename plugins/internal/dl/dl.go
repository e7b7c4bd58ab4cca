// Package dl opens vendor libraries at run time (dlopen with
// RTLD_NOW|RTLD_LOCAL) and looks up their entry points (dlsym), so that a
// GPU backend builds with no vendor SDK and calls the library through small
// C trampolines of its own that cast each resolved pointer to its C type
// (see plugins/cuda/driver and plugins/rocm/hip). A missing library or
// symbol is an error the backend reports as "backend unavailable: …"; no
// symbol is left for the dynamic linker to bind lazily, so -z now builds
// and missing entry points never crash the process.
package dl

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/wcache/wcache/plugins/internal/fatal"
	"github.com/wcache/wcache/sdk"
)

// Library is an opened shared object. It is never closed while its entry
// points may run; Close is for a library that turned out unusable.
type Library struct {
	path string
	h    unsafe.Pointer
}

// Open loads the first of candidates that dlopen accepts (each a path, or
// a name the dynamic loader searches for) and returns it. When none loads,
// the error is a *LoadError listing every candidate and the dynamic
// loader's reason for each; it wraps sdk.ErrUnavailable.
func Open(candidates ...string) (*Library, error) {
	runtime.LockOSThread() // dlerror is per thread
	defer runtime.UnlockOSThread()
	var reasons []string
	for _, path := range candidates {
		cpath := C.CString(path)
		C.dlerror()
		h := C.dlopen(cpath, C.RTLD_NOW|C.RTLD_LOCAL)
		C.free(unsafe.Pointer(cpath))
		if h != nil {
			return &Library{path: path, h: h}, nil
		}
		reasons = append(reasons, dlerror())
	}
	return nil, &LoadError{Library: strings.Join(candidates, ", "), Reason: strings.Join(reasons, "; ")}
}

// Path returns the candidate Open loaded.
func (l *Library) Path() string { return l.path }

// Sym returns the address of name, or nil when the library lacks it.
func (l *Library) Sym(name string) unsafe.Pointer {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return C.dlsym(l.h, cname)
}

// Close unloads the library (dlclose). Only for a library none of whose
// entry points was called and none will be.
func (l *Library) Close() {
	if l.h != nil {
		C.dlclose(l.h)
		l.h = nil
	}
}

func dlerror() string {
	if e := C.dlerror(); e != nil {
		return C.GoString(e)
	}
	return "unknown dlopen error"
}

// LoadError reports that a vendor library cannot be used: it could not be
// loaded, or it lacks entry points the backend needs. It wraps
// sdk.ErrUnavailable.
type LoadError struct {
	Library string   // the path or name passed to dlopen (candidates, comma-separated)
	Missing []string // missing symbols, in resolution order; empty when dlopen failed
	Reason  string   // dlerror text when dlopen failed
}

func (e *LoadError) Error() string {
	switch {
	case len(e.Missing) == 1:
		return fmt.Sprintf("%v: %s: missing symbol %s", sdk.ErrUnavailable, e.Library, e.Missing[0])
	case len(e.Missing) > 1:
		return fmt.Sprintf("%v: %s: missing symbols %s", sdk.ErrUnavailable, e.Library, strings.Join(e.Missing, ", "))
	default:
		return fmt.Sprintf("%v: cannot load %s: %s", sdk.ErrUnavailable, e.Library, e.Reason)
	}
}

// Unwrap returns sdk.ErrUnavailable.
func (e *LoadError) Unwrap() error { return sdk.ErrUnavailable }

// Resolve looks up every name in l and returns the addresses in order;
// the names optional reports true for may be missing (nil). When required
// names are missing it closes l and returns a *LoadError naming them all.
func Resolve(l *Library, names []string, optional func(i int) bool) ([]unsafe.Pointer, error) {
	out := make([]unsafe.Pointer, len(names))
	var missing []string
	for i, n := range names {
		out[i] = l.Sym(n)
		if out[i] == nil && (optional == nil || !optional(i)) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		l.Close()
		return nil, &LoadError{Library: l.path, Missing: missing}
	}
	return out, nil
}

// Resolved reports whether every entry point of fns was found (none is
// nil): a backend's test for an optional group of them.
func Resolved(fns []unsafe.Pointer) bool {
	for _, p := range fns {
		if p == nil {
			return false
		}
	}
	return true
}

// Load opens a vendor library and resolves its entry points: path when
// it is not "", otherwise the first of defaults that dlopen accepts (see
// Open), then every name as Resolve does. It returns the library's path
// and the addresses by index of names; errors are Open's and Resolve's.
func Load(path string, defaults []string, names []string, optional func(i int) bool) (string, []unsafe.Pointer, error) {
	candidates := defaults
	if path != "" {
		candidates = []string{path}
	}
	lib, err := Open(candidates...)
	if err != nil {
		return "", nil, err
	}
	fn, err := Resolve(lib, names, optional)
	if err != nil {
		return "", nil, err
	}
	return lib.Path(), fn, nil
}

// Code is a vendor library's result code (CUresult, hipError_t), 0 for
// success: Kind maps it to the sdk sentinel callers branch on (nil for
// none), CType names its C type.
type Code interface {
	~int32
	Kind() error
	CType() string
}

// CallError is a failed call of a vendor library's entry point. It
// unwraps to the sdk sentinel of its code (Code.Kind), so
// errors.Is(err, sdk.ErrOutOfMemory) works on it; errors.As gives the raw
// code.
type CallError[C Code] struct {
	Func string // entry point, e.g. "cuMemAlloc_v2"
	Code C
	Name string // the library's name of the code, e.g. "CUDA_ERROR_OUT_OF_MEMORY"; "" if it does not know the code
	Desc string // the library's description of the code; "" if unknown
}

func (e *CallError[C]) Error() string {
	name := e.Name
	if name == "" {
		name = e.Code.CType()
	}
	if e.Desc == "" {
		return fmt.Sprintf("%s: %s (%d)", e.Func, name, int(e.Code))
	}
	return fmt.Sprintf("%s: %s (%d): %s", e.Func, name, int(e.Code), e.Desc)
}

// Unwrap returns the sdk sentinel for the code, or nil.
func (e *CallError[C]) Unwrap() error { return e.Code.Kind() }

// IsCode reports whether err is (or wraps) a *CallError of code type C,
// and whether its code is code.
func IsCode[C Code](err error, code C) (callError, is bool) {
	var e *CallError[C]
	if !errors.As(err, &e) {
		return false, false
	}
	return true, e.Code == code
}

// Check returns nil when code is 0 (success), else a *CallError of the
// entry point fn with the library's name and description of the code;
// when isFatal reports the code fatal (the process cannot use the GPU
// again) it sets latch to the error first (the first one stays).
func Check[C Code](fn string, code C, name, desc func(C) string, isFatal func(C) bool, latch *fatal.Latch) error {
	if code == 0 {
		return nil
	}
	err := &CallError[C]{Func: fn, Code: code, Name: name(code), Desc: desc(code)}
	if isFatal(code) {
		latch.Set(err)
	}
	return err
}
