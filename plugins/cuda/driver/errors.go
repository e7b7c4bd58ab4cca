package driver

import (
	"fmt"
	"strings"

	"github.com/wcache/wcache/sdk"
)

// LoadError reports that the driver library cannot be used: it could not be
// loaded, or it lacks entry points the backend needs. It wraps
// sdk.ErrUnavailable.
type LoadError struct {
	Library string   // the path or name passed to dlopen
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

// Error is a failed driver call. It unwraps to the sdk sentinel that
// matches its code (see Result.Kind), so errors.Is(err, sdk.ErrOutOfMemory)
// works on it; errors.As gives the raw code.
type Error struct {
	Func string // entry point, e.g. "cuMemAlloc_v2"
	Code Result
	Name string // cuGetErrorName, e.g. "CUDA_ERROR_OUT_OF_MEMORY"; "" if the driver does not know the code
	Desc string // cuGetErrorString; "" if unknown
}

func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = "CUresult"
	}
	if e.Desc == "" {
		return fmt.Sprintf("%s: %s (%d)", e.Func, name, int(e.Code))
	}
	return fmt.Sprintf("%s: %s (%d): %s", e.Func, name, int(e.Code), e.Desc)
}

// Unwrap returns the sdk sentinel for the code, or nil.
func (e *Error) Unwrap() error { return e.Code.Kind() }
