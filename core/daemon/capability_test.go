package daemon_test

import (
	"context"
	"errors"
	"testing"

	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
)

func TestDeviceCapability(t *testing.T) {
	b := &mock.Backend{DevicesFunc: func(context.Context) ([]sdk.Device, error) {
		return []sdk.Device{{Ordinal: 0, Capability: "sm_80"}, {Ordinal: 1, Capability: "sm_90"}}, nil
	}}
	got, err := daemon.DeviceCapability(context.Background(), b, 1)
	if err != nil || got != "sm_90" {
		t.Fatalf("GPU 1: %q, %v; want sm_90", got, err)
	}
	if _, err := daemon.DeviceCapability(context.Background(), b, 2); !errors.Is(err, sdk.ErrNoSuchDevice) {
		t.Fatalf("GPU 2: %v, want sdk.ErrNoSuchDevice", err)
	}
	boom := errors.New("boom")
	b.DevicesFunc = func(context.Context) ([]sdk.Device, error) { return nil, boom }
	if _, err := daemon.DeviceCapability(context.Background(), b, 0); !errors.Is(err, boom) {
		t.Fatalf("failing Devices: %v, want it wrapped", err)
	}
}
