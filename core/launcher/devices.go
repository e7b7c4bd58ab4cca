package launcher

import (
	"context"
	"fmt"

	"github.com/wcache/wcache/sdk"
)

// DeviceMap is a fixed GPU ordinal → UUID map. It lets a caller resolve
// every UUID through a backend plugin, close the plugin, and only then
// Launch (a plugin left running could hold a device context on every GPU).
type DeviceMap map[int]string

// DeviceUUID implements DeviceResolver; an ordinal not in the map is
// sdk.ErrNoSuchDevice.
func (m DeviceMap) DeviceUUID(_ context.Context, ordinal int) (string, error) {
	u, ok := m[ordinal]
	if !ok {
		return "", fmt.Errorf("GPU %d was not resolved: %w", ordinal, sdk.ErrNoSuchDevice)
	}
	return u, nil
}

// ResolveDevices asks d for the UUID of every rank's GPU.
func ResolveDevices(ctx context.Context, d DeviceResolver, ranks []Rank) (DeviceMap, error) {
	m := make(DeviceMap, len(ranks))
	for _, r := range ranks {
		u, err := d.DeviceUUID(ctx, r.GPUID)
		if err != nil {
			return nil, fmt.Errorf("resolve the UUID of GPU %d (for %s): %w", r.GPUID, r, err)
		}
		m[r.GPUID] = u
	}
	return m, nil
}
