package sdk

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
)

// Sentinel errors. Backends wrap them (fmt.Errorf("…: %w", sdk.ErrOutOfMemory)
// or sdk.Errorf); the gRPC adapters carry the kind across the process
// boundary so errors.Is works on the host side too.
var (
	// ErrNoSuchDevice: the ordinal (or UUID) names no visible device.
	ErrNoSuchDevice = errors.New("no such device")
	// ErrOutOfMemory: the device cannot hold the requested allocation.
	ErrOutOfMemory = errors.New("out of device memory")
	// ErrUnsupported: the backend does not implement this operation or
	// handle kind.
	ErrUnsupported = errors.New("unsupported")
	// ErrUnavailable: the backend cannot run here (missing driver library,
	// missing symbol, no devices, the plugin process died).
	ErrUnavailable = errors.New("backend unavailable")
	// ErrInvalidArgument: a range past the end, a bad extent, a bad handle.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNoSuchAllocation: the allocation id is unknown or already freed.
	ErrNoSuchAllocation = errors.New("no such allocation")
)

// Errorf formats a message and wraps kind, one of the sentinel errors.
func Errorf(kind error, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), kind)
}

// RemoteError is an error a backend returned across the plugin boundary.
// Error() is the backend's message unchanged; errors.Is(err, ErrOutOfMemory)
// and friends hold when the backend's error wrapped that sentinel.
type RemoteError struct {
	Code    codes.Code // gRPC code the error travelled with
	Kind    error      // one of the sentinel errors, or nil when untyped
	Message string     // the backend's err.Error()
}

func (e *RemoteError) Error() string { return e.Message }

// Unwrap returns the sentinel, so errors.Is(err, sdk.ErrOutOfMemory) works.
func (e *RemoteError) Unwrap() error { return e.Kind }

// TransportError reports a call that did not complete because the
// connection to the plugin failed: the plugin process died, closed the
// connection or never answered. It wraps ErrUnavailable (and the underlying
// gRPC error), so callers that only branch on the sentinels treat a dead
// plugin like any other unavailable backend.
type TransportError struct {
	Op  string // the Backend method, e.g. "Load"
	Err error  // the gRPC error
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("backend plugin connection failed during %s: %s: %v", e.Op, ErrUnavailable, e.Err)
}

// Unwrap lets errors.Is match both ErrUnavailable and the gRPC error.
func (e *TransportError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }
