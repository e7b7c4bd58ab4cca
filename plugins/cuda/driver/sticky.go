package driver

import "sync"

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

// stickyLatch keeps the first sticky error a Driver saw. Its zero value is
// ready to use.
type stickyLatch struct {
	mu  sync.Mutex
	err *Error
	ch  chan struct{} // closed when err is set
}

func (l *stickyLatch) latch(err *Error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = err
	if l.ch == nil {
		l.ch = make(chan struct{})
	}
	close(l.ch)
}

func (l *stickyLatch) done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ch == nil {
		l.ch = make(chan struct{})
	}
	return l.ch
}

func (l *stickyLatch) get() *Error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Sticky returns the first sticky error (see Result.Sticky) any call
// returned, or nil. Once it is set the process cannot use CUDA again.
func (d *Driver) Sticky() *Error { return d.sticky.get() }

// StickyDone is closed when the first sticky error happens.
func (d *Driver) StickyDone() <-chan struct{} { return d.sticky.done() }
