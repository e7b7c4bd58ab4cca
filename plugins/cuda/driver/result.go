package driver

import "github.com/wcache/wcache/sdk"

// Result is a CUresult.
type Result int32

// CUresult codes the backend branches on or maps to sdk errors (cuda.h).
const (
	Success                         Result = 0
	ErrorInvalidValue               Result = 1
	ErrorOutOfMemory                Result = 2
	ErrorNotInitialized             Result = 3
	ErrorDeinitialized              Result = 4
	ErrorStubLibrary                Result = 34
	ErrorInsufficientDriver         Result = 35
	ErrorDeviceUnavailable          Result = 46
	ErrorNoDevice                   Result = 100
	ErrorInvalidDevice              Result = 101
	ErrorDeviceNotLicensed          Result = 102
	ErrorInvalidContext             Result = 201
	ErrorSharedObjectInitFailed     Result = 303
	ErrorInvalidHandle              Result = 400
	ErrorNotFound                   Result = 500
	ErrorContextIsDestroyed         Result = 709
	ErrorNotPermitted               Result = 800
	ErrorNotSupported               Result = 801
	ErrorSystemNotReady             Result = 802
	ErrorSystemDriverMismatch       Result = 803
	ErrorCompatNotSupportedOnDevice Result = 804
)

// CType is "CUresult" (dl.Code).
func (Result) CType() string { return "CUresult" }

// Kind maps a code to the sdk sentinel callers branch on:
//
//	CUDA_ERROR_OUT_OF_MEMORY                       → sdk.ErrOutOfMemory
//	CUDA_ERROR_INVALID_DEVICE                      → sdk.ErrNoSuchDevice
//	NO_DEVICE, NOT_INITIALIZED, DEINITIALIZED,
//	STUB_LIBRARY, INSUFFICIENT_DRIVER, DEVICE_UNAVAILABLE, DEVICE_NOT_LICENSED,
//	SHARED_OBJECT_INIT_FAILED, SYSTEM_NOT_READY, SYSTEM_DRIVER_MISMATCH,
//	COMPAT_NOT_SUPPORTED_ON_DEVICE                 → sdk.ErrUnavailable
//	INVALID_VALUE, INVALID_HANDLE                  → sdk.ErrInvalidArgument
//	NOT_SUPPORTED                                  → sdk.ErrUnsupported
//	sticky codes (see Sticky: 214, 700, 719, 999 …) → sdk.ErrUnavailable
//
// Anything else (and Success) maps to nil.
func (r Result) Kind() error {
	switch r {
	case ErrorOutOfMemory:
		return sdk.ErrOutOfMemory
	case ErrorInvalidDevice:
		return sdk.ErrNoSuchDevice
	case ErrorNoDevice, ErrorNotInitialized, ErrorDeinitialized, ErrorStubLibrary,
		ErrorInsufficientDriver, ErrorDeviceUnavailable, ErrorDeviceNotLicensed,
		ErrorSharedObjectInitFailed, ErrorSystemNotReady, ErrorSystemDriverMismatch,
		ErrorCompatNotSupportedOnDevice:
		return sdk.ErrUnavailable
	case ErrorInvalidValue, ErrorInvalidHandle:
		return sdk.ErrInvalidArgument
	case ErrorNotSupported:
		return sdk.ErrUnsupported
	}
	if r.Sticky() {
		return sdk.ErrUnavailable
	}
	return nil
}
