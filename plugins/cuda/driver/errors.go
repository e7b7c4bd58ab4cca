package driver

import "github.com/wcache/wcache/plugins/internal/dl"

// LoadError reports that the driver library cannot be used: it could not be
// loaded, or it lacks entry points the backend needs. It wraps
// sdk.ErrUnavailable (shared with the other backends: plugins/internal/dl).
type LoadError = dl.LoadError

// Error is a failed driver call (the same for every vendor:
// plugins/internal/dl). It unwraps to the sdk sentinel that matches its
// code (see Result.Kind), so errors.Is(err, sdk.ErrOutOfMemory) works on
// it; errors.As gives the raw code. Name is cuGetErrorName's, Desc
// cuGetErrorString's ("" when the driver does not know the code).
type Error = dl.CallError[Result]
