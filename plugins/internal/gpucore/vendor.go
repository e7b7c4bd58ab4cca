package gpucore

import (
	"context"
	"errors"
	"io"

	"github.com/wcache/wcache/sdk"
)

// VendorRuntime is what a vendor's runtime (CUDA, ROCm) adds to this
// package's Runtime, which it owns (Core): the backend's description, its
// device list and the UUIDs by ordinal. Vendor checks that the backend is
// live before it asks for devices or UUIDs.
type VendorRuntime interface {
	io.Closer
	Core() *Runtime
	Info() sdk.Info
	Devices(ctx context.Context) ([]sdk.Device, error)
	DeviceUUID(ordinal int) (string, error)
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
// (VendorRuntime.Devices); ErrUnavailable once closed.
func (v *Vendor[R]) Devices(ctx context.Context) ([]sdk.Device, error) {
	if err := v.Live(); err != nil {
		return nil, err
	}
	return v.rt.Devices(ctx)
}

// DeviceUUID returns the UUID of the device this process sees as ordinal
// (VendorRuntime.DeviceUUID); ErrUnavailable once closed.
func (v *Vendor[R]) DeviceUUID(_ context.Context, ordinal int) (string, error) {
	if err := v.Live(); err != nil {
		return "", err
	}
	return v.rt.DeviceUUID(ordinal)
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
