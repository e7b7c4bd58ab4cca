package launcher

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/wcache/wcache/sdk"
)

func TestResolveDevicesAndDeviceMap(t *testing.T) {
	ranks, err := Place(Topology{TPSize: 2, PPSize: 1, NNodes: 1, BaseGPUID: 1, GPUIDStep: 1})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	m, err := ResolveDevices(context.Background(), resolverFunc(func(i int) (string, error) {
		calls++
		return fmt.Sprintf("GPU-%d", i), nil
	}), ranks)
	if err != nil || calls != 2 || !reflect.DeepEqual(m, DeviceMap{1: "GPU-1", 2: "GPU-2"}) {
		t.Fatalf("ResolveDevices = %v, %v after %d calls", m, err, calls)
	}
	if u, err := m.DeviceUUID(context.Background(), 2); u != "GPU-2" || err != nil {
		t.Fatalf("DeviceUUID(2) = %q, %v", u, err)
	}
	if _, err := m.DeviceUUID(context.Background(), 0); !errors.Is(err, sdk.ErrNoSuchDevice) {
		t.Fatalf("DeviceUUID(0) = %v, want ErrNoSuchDevice", err)
	}
	_, err = ResolveDevices(context.Background(), resolverFunc(func(i int) (string, error) {
		return "", sdk.Errorf(sdk.ErrNoSuchDevice, "ordinal %d", i)
	}), ranks)
	if !errors.Is(err, sdk.ErrNoSuchDevice) {
		t.Fatalf("ResolveDevices with a failing backend = %v", err)
	}
}
