package gpucore

import (
	"errors"
	"io"
)

// Vendor is the glue a vendor backend (CUDA, ROCm) puts around Backend:
// the vendor's Runtime R (which owns this package's Runtime and adds the
// device list) and whether the Backend owns it. A vendor backend embeds it
// and adds Info, Devices and DeviceUUID.
type Vendor[R io.Closer] struct {
	*Backend
	rt   R
	owns bool
}

// NewVendor returns a Vendor of b over rt. When owns, Close closes rt too
// (the backend New opened with its Runtime); otherwise rt stays open for
// the other Backends over it.
func NewVendor[R io.Closer](b *Backend, rt R, owns bool) Vendor[R] {
	return Vendor[R]{Backend: b, rt: rt, owns: owns}
}

// Runtime returns the vendor Runtime the Backend uses.
func (v Vendor[R]) Runtime() R { return v.rt }

// Close frees every allocation and mapping the Backend's ids hold (memory
// another Backend still references stays until that one lets go), and
// closes the Runtime if the Vendor owns it. Calls after Close fail with
// ErrUnavailable. Close is idempotent.
func (v Vendor[R]) Close() error {
	err := v.Backend.Close()
	if v.owns {
		err = errors.Join(err, v.rt.Close())
	}
	return err
}
