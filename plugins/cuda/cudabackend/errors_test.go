package cudabackend

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
	"github.com/wcache/wcache/sdk"
)

func TestUnavailableBackend(t *testing.T) {
	cause := sdk.Errorf(sdk.ErrUnavailable, "libcuda.so.1: missing symbol cuMemAlloc_v2")
	u := Unavailable(cause)
	ctx := context.Background()
	info, err := u.Info(ctx)
	if err != nil || info.Platform != Platform || info.HandleKinds[0] != HandleKind {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	_, err1 := u.Devices(ctx)
	_, err2 := u.DeviceUUID(ctx, 0)
	_, _, err3 := u.Allocate(ctx, 0, 1)
	err4 := u.Load(ctx, 1, nil, nil)
	_, err5 := u.Export(ctx, 1)
	_, err6 := u.Import(ctx, 0, sdk.Handle{})
	_, err7 := u.Read(ctx, 1, 0, 1)
	_, err8 := u.Digest(ctx, 1, nil)
	err9 := u.Free(ctx, 1)
	for i, err := range []error{err1, err2, err3, err4, err5, err6, err7, err8, err9} {
		if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "missing symbol cuMemAlloc_v2") {
			t.Errorf("call %d = %v, want the cause", i+1, err)
		}
	}
}

func TestRuntimeCloseFreesSharedMemory(t *testing.T) {
	rt, err := OpenRuntime(fakeConfig(t, gputest.FakeOptions{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b1, b2 := rt.NewBackend(), rt.NewBackend()
	id, _, err := b1.Allocate(ctx, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	h, err := b1.Export(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	alias, err := b2.Import(ctx, 1, h)
	if err != nil {
		t.Fatalf("Import in a second Backend of the Runtime (on another ordinal): %v", err)
	}
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Read(ctx, alias, 0, 16); err != nil {
		t.Fatalf("Read through the other Backend after the exporter closed: %v", err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Read(ctx, alias, 0, 16); !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("Read after Runtime.Close = %v, want ErrUnavailable", err)
	}
}
