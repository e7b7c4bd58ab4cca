package sdk

import "errors"

// ExitFatal is the exit status of a plugin that ends after a *FatalError.
const ExitFatal = 70

// FatalError marks a failure the plugin process cannot survive, typically
// from the driver layer (a poisoned device context, a corrupted driver
// state). Panic with one, directly or through Fatal, anywhere below a
// Backend method: the plugin runtime (sdk/plugin.Serve) answers the call
// with the error (wrapping ErrUnavailable on the host side), logs it once
// with the stack, and exits the process with ExitFatal shortly after,
// without a crash dump. Any other panic in a Backend method is recovered
// and answered as an error (gRPC INTERNAL with the panic message; the
// stack logged once), and the plugin keeps serving.
type FatalError struct {
	Err error
}

func (e *FatalError) Error() string { return "fatal backend error: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *FatalError) Unwrap() error { return e.Err }

// Fatal panics with a *FatalError wrapping err (see FatalError).
func Fatal(err error) {
	if err == nil {
		err = errors.New("sdk.Fatal(nil)")
	}
	panic(&FatalError{Err: err})
}
