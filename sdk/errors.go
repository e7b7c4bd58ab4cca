package sdk

import (
	"errors"
	"fmt"
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
