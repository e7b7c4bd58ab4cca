package driver

// Sticky CUresult codes (cuda.h). After one of them the CUDA context is
// corrupt: every later call in the process fails with the same code, and
// only a new process can use the device again.
const (
	ErrorECCUncorrectable    Result = 214
	ErrorNVLinkUncorrectable Result = 220
	ErrorIllegalAddress      Result = 700
	ErrorLaunchTimeout       Result = 702
	ErrorHardwareStackError  Result = 714
	ErrorIllegalInstruction  Result = 715
	ErrorMisalignedAddress   Result = 716
	ErrorInvalidAddressSpace Result = 717
	ErrorInvalidPC           Result = 718
	ErrorLaunchFailed        Result = 719
	ErrorUnknown             Result = 999
)

// Sticky reports whether r leaves the context unusable for the rest of the
// process: uncorrectable ECC or NVLink errors, the kernel faults 700 and
// 714–719, a launch timeout, and CUDA_ERROR_UNKNOWN (999), which real
// drivers return after Xid errors that took the GPU down.
func (r Result) Sticky() bool {
	switch r {
	case ErrorECCUncorrectable, ErrorNVLinkUncorrectable, ErrorIllegalAddress, ErrorLaunchTimeout,
		ErrorHardwareStackError, ErrorIllegalInstruction, ErrorMisalignedAddress,
		ErrorInvalidAddressSpace, ErrorInvalidPC, ErrorLaunchFailed, ErrorUnknown:
		return true
	}
	return false
}

// Sticky returns the first sticky error (see Result.Sticky) any call
// returned, or nil. Once it is set the process cannot use CUDA again.
func (d *Driver) Sticky() *Error {
	if e, ok := d.sticky.Err().(*Error); ok {
		return e
	}
	return nil
}

// StickyDone is closed when the first sticky error happens.
func (d *Driver) StickyDone() <-chan struct{} { return d.sticky.Done() }
