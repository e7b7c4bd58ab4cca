package driver

import (
	"fmt"

	"github.com/wcache/wcache/plugins/internal/dl"
)

// LoadError reports that the driver library cannot be used: it could not be
// loaded, or it lacks entry points the backend needs. It wraps
// sdk.ErrUnavailable (shared with the other backends: plugins/internal/dl).
type LoadError = dl.LoadError

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
