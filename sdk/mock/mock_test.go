package mock_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
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

func TestMemoryConformance(t *testing.T) {
	for _, memfd := range []bool{false, true} {
		t.Run(map[bool]string{false: "files", true: "memfd"}[memfd], func(t *testing.T) {
			dir := t.TempDir()
			backendtest.Run(t, func(t *testing.T) sdk.Backend {
				m, err := mock.NewMemory(mock.MemoryOptions{Dir: dir, Memory: 64 << 20, Memfd: memfd,
					DeviceUUIDs: []string{"GPU-11111111-2222-4333-8444-555555555555", "GPU-66666666-7777-4888-8999-000000000000"}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				return m
			}, backendtest.Options{})
		})
	}
}

func TestMemoryCloseRemovesFilesAndWrapInjects(t *testing.T) {
	dir := t.TempDir()
	m, err := mock.NewMemory(mock.MemoryOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if _, _, err := m.Allocate(ctx, 0, 5000); err != nil {
			t.Fatal(err)
		}
	}
	if files, _ := os.ReadDir(dir); len(files) != 2 {
		t.Fatalf("files after two allocations: %v", files)
	}
	w := mock.Wrap(m)
	injected := errors.New("injected")
	w.ExportFunc = func(context.Context, sdk.AllocationID) (sdk.Handle, error) { return sdk.Handle{}, injected }
	if _, err := w.Export(ctx, 1); !errors.Is(err, injected) {
		t.Errorf("wrapped Export = %v, want the injected error", err)
	}
	if h, err := m.Export(ctx, 1); err != nil || h.Size != 8192 {
		t.Errorf("Export = %+v, %v; want an 8192-byte handle", h, err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Errorf("files after Close: %v", files)
	}
	if _, _, err := w.Allocate(ctx, 0, 1); !errors.Is(err, sdk.ErrUnavailable) {
		t.Errorf("Allocate after Close = %v, want ErrUnavailable", err)
	}
}

func TestNewMemoryRemovesFilesOfDeadProcesses(t *testing.T) {
	dir := t.TempDir()
	backendtest.CheckRemovesStaleShmFiles(t, dir, func() {
		if _, err := mock.NewMemory(mock.MemoryOptions{Dir: dir}); err != nil {
			t.Fatal(err)
		}
	})
}
