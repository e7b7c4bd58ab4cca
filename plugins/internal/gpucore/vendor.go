package gpucore

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/wcache/wcache/sdk"
)

// VendorRuntime is what a vendor's runtime (CUDA, ROCm) adds to this
// package's Runtime, which it owns (Core): the backend's description, the
// devices it found at open and its management library's memory figures.
// Vendor lists devices and answers UUIDs from them, after checking that
// the backend is live.
type VendorRuntime interface {
	io.Closer
	Core() *Runtime
	Info() sdk.Info
	// DeviceTable lists the devices this process sees, by ordinal (as
	// many as Core's Driver.DeviceCount), as the runtime found them at
	// open: UUID, name, PCI bus id, capability and total memory;
	// FreeMemory is not read.
	DeviceTable() []sdk.Device
	// MonitorMemory returns a device's free and total bytes from the
	// vendor's management library (NVML, amdsmi); ok is false when the
	// library is absent or does not know the device (see
	// Runtime.DeviceMemory).
	MonitorMemory(ordinal int) (free, total uint64, ok bool)
}

// Vendor is a vendor's sdk.Backend: a Backend (allocation ids over Core's
// memory) plus the vendor runtime R's Info, Devices and DeviceUUID, and
// whether Close closes R. The CUDA and ROCm backends are a Vendor each
// (type Backend = gpucore.Vendor[*Runtime]). It is safe for concurrent use.
type Vendor[R VendorRuntime] struct {
	*Backend
	rt   R
	owns bool
}

// Own returns a Vendor that owns rt (Close closes it), or err when opening
// rt failed: Own(OpenRuntime(cfg, logger)).
func Own[R VendorRuntime](rt R, err error) (*Vendor[R], error) {
	if err != nil {
		return nil, err
	}
	return &Vendor[R]{Backend: rt.Core().NewBackend(), rt: rt, owns: true}, nil
}

// Share returns another Vendor over rt, with its own allocation ids;
// closing it frees its allocations but leaves rt open.
func Share[R VendorRuntime](rt R) *Vendor[R] {
	return &Vendor[R]{Backend: rt.Core().NewBackend(), rt: rt}
}

var _ sdk.Backend = (*Vendor[VendorRuntime])(nil)

// Runtime returns the vendor runtime the Backend uses.
func (v *Vendor[R]) Runtime() R { return v.rt }

// Info describes the backend (VendorRuntime.Info).
func (v *Vendor[R]) Info(context.Context) (sdk.Info, error) { return v.rt.Info(), nil }

// Devices lists the devices this process sees, by ordinal
// (VendorRuntime.DeviceTable), with their memory as Runtime.DeviceMemory
// gives it: the management library's figures when it knows the device,
// else the free bytes of a running device worker (0, meaning unknown,
// without one: listing devices never creates a context, which costs
// device memory and, on an exclusive GPU, locks the engines out) and the
// driver's total. ErrUnavailable once closed.
func (v *Vendor[R]) Devices(ctx context.Context) ([]sdk.Device, error) {
	if err := v.Live(); err != nil {
		return nil, err
	}
	out := v.rt.DeviceTable()
	for i := range out {
		d := &out[i]
		free, total, err := v.rt.Core().DeviceMemory(ctx, d.Ordinal, d.TotalMemory, func() (uint64, uint64, bool) {
			return v.rt.MonitorMemory(d.Ordinal)
		})
		if err != nil {
			return nil, err
		}
		d.FreeMemory, d.TotalMemory = free, total
	}
	return out, nil
}

// DeviceUUID returns the UUID of the device this process sees as ordinal
// (VendorRuntime.DeviceTable): the canonical form every engine process
// with the same environment sees. An unknown ordinal is ErrNoSuchDevice;
// ErrUnavailable once closed.
func (v *Vendor[R]) DeviceUUID(_ context.Context, ordinal int) (string, error) {
	if err := v.Live(); err != nil {
		return "", err
	}
	if err := v.rt.Core().CheckOrdinal(ordinal); err != nil {
		return "", err
	}
	return v.rt.DeviceTable()[ordinal].UUID, nil
}

// Close frees every allocation and mapping the Backend's ids hold (memory
// another Backend still references stays until that one lets go), and
// closes the vendor runtime if the Vendor owns it. Calls after Close fail
// with ErrUnavailable. Close is idempotent.
func (v *Vendor[R]) Close() error {
	err := v.Backend.Close()
	if v.owns {
		err = errors.Join(err, v.rt.Close())
	}
	return err
}

// ComputeModeError reports a device whose compute mode (a vendor's M)
// keeps the backend from serving it: Why says what the mode means for the
// inference engines and how to change it. It wraps sdk.ErrUnavailable.
type ComputeModeError[M ~int] struct {
	Ordinal int
	UUID    string
	Mode    M
	Why     string
}

func (e *ComputeModeError[M]) Error() string {
	return fmt.Sprintf("%v: device %d (%s) is in %s", sdk.ErrUnavailable, e.Ordinal, e.UUID, e.Why)
}

// Unwrap returns sdk.ErrUnavailable.
func (e *ComputeModeError[M]) Unwrap() error { return sdk.ErrUnavailable }
