package hip

import (
	"github.com/wcache/wcache/plugins/internal/dl"
	"github.com/wcache/wcache/sdk"
)

// Code is a hipError_t.
type Code int32

// hipError_t codes the backend branches on or maps to sdk errors
// (hip_runtime_api.h).
const (
	Success                     Code = 0
	ErrorInvalidValue           Code = 1
	ErrorOutOfMemory            Code = 2
	ErrorNotInitialized         Code = 3
	ErrorDeinitialized          Code = 4
	ErrorInvalidDevicePointer   Code = 17
	ErrorInsufficientDriver     Code = 35
	ErrorNoDevice               Code = 100
	ErrorInvalidDevice          Code = 101
	ErrorInvalidContext         Code = 201
	ErrorMapFailed              Code = 205
	ErrorECCNotCorrectable      Code = 214
	ErrorPeerAccessUnsupported  Code = 217
	ErrorSharedObjectInitFailed Code = 303
	ErrorInvalidHandle          Code = 400
	ErrorIllegalAddress         Code = 700
	ErrorLaunchTimeOut          Code = 702
	ErrorPeerAccessEnabled      Code = 704 // hipErrorPeerAccessAlreadyEnabled
	ErrorAssert                 Code = 710
	ErrorLaunchFailure          Code = 719
	ErrorNotSupported           Code = 801
	ErrorUnknown                Code = 999
)

// CType is "hipError_t" (dl.Code).
func (Code) CType() string { return "hipError_t" }

// Fatal reports whether c leaves the process unable to use the GPU: an
// uncorrectable ECC error, an illegal address (a fault on the device), a
// launch timeout, a device-side assert or a launch failure. HIP then fails
// every later call, as CUDA does after its sticky errors. hipErrorUnknown
// (999) is not counted: HIP also returns it for failures the process
// survives.
func (c Code) Fatal() bool {
	switch c {
	case ErrorECCNotCorrectable, ErrorIllegalAddress, ErrorLaunchTimeOut, ErrorAssert, ErrorLaunchFailure:
		return true
	}
	return false
}

// Kind maps a code to the sdk sentinel callers branch on:
//
//	hipErrorOutOfMemory                              → sdk.ErrOutOfMemory
//	hipErrorInvalidDevice                            → sdk.ErrNoSuchDevice
//	NoDevice, NotInitialized, Deinitialized,
//	InsufficientDriver, SharedObjectInitFailed       → sdk.ErrUnavailable
//	InvalidValue, InvalidHandle, InvalidDevicePointer,
//	MapFailed                                        → sdk.ErrInvalidArgument
//	NotSupported                                     → sdk.ErrUnsupported
//	fatal codes (see Fatal)                          → sdk.ErrUnavailable
//
// Anything else (and Success) maps to nil.
func (c Code) Kind() error {
	switch c {
	case ErrorOutOfMemory:
		return sdk.ErrOutOfMemory
	case ErrorInvalidDevice:
		return sdk.ErrNoSuchDevice
	case ErrorNoDevice, ErrorNotInitialized, ErrorDeinitialized, ErrorInsufficientDriver, ErrorSharedObjectInitFailed:
		return sdk.ErrUnavailable
	case ErrorInvalidValue, ErrorInvalidHandle, ErrorInvalidDevicePointer, ErrorMapFailed:
		return sdk.ErrInvalidArgument
	case ErrorNotSupported:
		return sdk.ErrUnsupported
	}
	if c.Fatal() {
		return sdk.ErrUnavailable
	}
	return nil
}

// Error is a failed HIP call (the same for every vendor:
// plugins/internal/dl). It unwraps to the sdk sentinel that matches its
// code (see Code.Kind); errors.As gives the raw code. Name is
// hipGetErrorName's, Desc hipGetErrorString's.
type Error = dl.CallError[Code]
