package daemon

import (
	"context"
	"fmt"

	"github.com/wcache/wcache/sdk"
)

// DeviceLister lists a backend's devices; sdk.Backend implements it.
type DeviceLister interface {
	Devices(ctx context.Context) ([]sdk.Device, error)
}

// DeviceCapability is the capability string ("sm_90", "mock") of the GPU
// with ordinal gpu as the backend b lists it: the value a CacheConfig's
// DeviceCapability holds when the caller does not set one. A GPU the
// backend does not list is sdk.ErrNoSuchDevice.
func DeviceCapability(ctx context.Context, b DeviceLister, gpu int) (string, error) {
	devs, err := b.Devices(ctx)
	if err != nil {
		return "", fmt.Errorf("device capability: %w", err)
	}
	for _, d := range devs {
		if d.Ordinal == gpu {
			return d.Capability, nil
		}
	}
	return "", fmt.Errorf("device capability: the backend lists no GPU %d: %w", gpu, sdk.ErrNoSuchDevice)
}
