package gputest

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// CheckOutOfMemoryThenFree fills device 0 of b (capacity bytes) but for 4
// MiB, checks that 8 MiB more is ErrOutOfMemory (naming oomName, the
// vendor's error, unless it is ""), frees the first allocation and checks
// that the 8 MiB now fit.
func CheckOutOfMemoryThenFree(t *testing.T, b sdk.Backend, capacity uint64, oomName string) {
	t.Helper()
	ctx := context.Background()
	id, _, err := b.Allocate(ctx, 0, capacity-4<<20)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = b.Allocate(ctx, 0, 8<<20)
	if !errors.Is(err, sdk.ErrOutOfMemory) || !strings.Contains(err.Error(), oomName) {
		t.Fatalf("Allocate past the device = %v, want ErrOutOfMemory naming %q", err, oomName)
	}
	if err := b.Free(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Allocate(ctx, 0, 8<<20); err != nil {
		t.Fatalf("Allocate after Free: %v", err)
	}
}

// CheckClosedIsUnavailable opens a backend, allocates, closes it twice
// (the second Close is nil) and checks that Read, Allocate and Devices
// then fail with ErrUnavailable.
func CheckClosedIsUnavailable[B interface {
	sdk.Backend
	io.Closer
}](t *testing.T, open func() (B, error)) {
	t.Helper()
	b, err := open()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, _, err := b.Allocate(ctx, 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := b.Read(ctx, id, 0, 1); !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("Read after Close = %v, want ErrUnavailable", err)
	}
	if _, _, err := b.Allocate(ctx, 0, 1); !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("Allocate after Close = %v, want ErrUnavailable", err)
	}
	if _, err := b.Devices(ctx); !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("Devices after Close = %v, want ErrUnavailable", err)
	}
}
