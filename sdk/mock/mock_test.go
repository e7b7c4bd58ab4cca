package mock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
)

func TestUnsetFuncsAreUnsupported(t *testing.T) {
	var b mock.Backend
	ctx := context.Background()
	calls := map[string]error{}
	_, calls["Info"] = b.Info(ctx)
	_, calls["Devices"] = b.Devices(ctx)
	_, calls["DeviceUUID"] = b.DeviceUUID(ctx, 0)
	_, _, calls["Allocate"] = b.Allocate(ctx, 0, 1)
	calls["Load"] = b.Load(ctx, 1, nil, nil)
	_, calls["Export"] = b.Export(ctx, 1)
	_, calls["Import"] = b.Import(ctx, 0, sdk.Handle{})
	_, calls["Read"] = b.Read(ctx, 1, 0, 1)
	_, calls["Digest"] = b.Digest(ctx, 1, nil)
	calls["Free"] = b.Free(ctx, 1)
	for name, err := range calls {
		if !errors.Is(err, sdk.ErrUnsupported) {
			t.Errorf("%s with no func: err = %v, want ErrUnsupported", name, err)
		}
	}
}

func TestSetFuncsAreCalledWithArguments(t *testing.T) {
	var gotOrdinal int
	var gotBytes uint64
	b := mock.Backend{
		AllocateFunc: func(_ context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
			gotOrdinal, gotBytes = ordinal, bytes
			return 7, bytes + 1, nil
		},
		FreeFunc: func(_ context.Context, id sdk.AllocationID) error {
			return sdk.Errorf(sdk.ErrNoSuchAllocation, "allocation %d", id)
		},
	}
	id, n, err := b.Allocate(context.Background(), 3, 100)
	if err != nil || id != 7 || n != 101 || gotOrdinal != 3 || gotBytes != 100 {
		t.Fatalf("Allocate = (%d, %d, %v), saw ordinal %d bytes %d", id, n, err, gotOrdinal, gotBytes)
	}
	if err := b.Free(context.Background(), 9); !errors.Is(err, sdk.ErrNoSuchAllocation) || err.Error() != "allocation 9: no such allocation" {
		t.Fatalf("Free = %v", err)
	}
}
