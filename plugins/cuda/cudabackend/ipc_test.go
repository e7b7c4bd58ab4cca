package cudabackend

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/wcache/wcache/plugins/internal/gputest"
	"github.com/wcache/wcache/sdk"
)

// loadFile allocates size bytes on device 0 and loads the file at dest.
func loadFile(t *testing.T, b *Backend, path string, n int, size, dest uint64) sdk.AllocationID {
	return gputest.LoadFile(t, b, path, n, size, dest)
}

func TestImportOwnExportSharesTheAllocation(t *testing.T) {
	// Without NVML, FreeMemory is the driver's count (cuMemGetInfo).
	b := newBackend(t, fakeConfig(t, fakeOptions{noNVML: true}))
	ctx := context.Background()
	path, data := writeFile(t, 300_000, 1)
	id := loadFile(t, b, path, len(data), 1<<20, 100)
	h, err := b.Export(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if h.Kind != HandleKind || len(h.Data) != 64 || h.Size != 1<<20 {
		t.Fatalf("Export = %s, %d bytes of data, size %d", h.Kind, len(h.Data), h.Size)
	}
	again, err := b.Export(ctx, id)
	if err != nil || !bytes.Equal(again.Data, h.Data) {
		t.Fatalf("second Export = %x, %v; want the cached handle", again.Data, err)
	}
	alias, err := b.Import(ctx, 0, h)
	if err != nil {
		t.Fatalf("Import of this process's own handle: %v", err)
	}
	if alias == id {
		t.Fatal("Import returned the exporter's id")
	}
	// The alias keeps the memory after the original id is freed.
	if err := b.Free(ctx, id); err != nil {
		t.Fatal(err)
	}
	got, err := b.Read(ctx, alias, 100, uint64(len(data)))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Read through the alias after freeing the original: %v (equal=%v)", err, bytes.Equal(got, data))
	}
	if err := b.Free(ctx, alias); err != nil {
		t.Fatal(err)
	}
	// Both ids gone: the memory is freed and the handle is stale.
	if _, err := b.Import(ctx, 0, h); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Fatalf("Import of a freed allocation's handle = %v, want ErrInvalidArgument", err)
	}
	if free := freeMemory(t, b); free != fakeMemory {
		t.Fatalf("device free memory %d after freeing everything, want %d", free, fakeMemory)
	}
}

// freeMemory returns ordinal 0's FreeMemory as the fake driver counts it.
func freeMemory(t *testing.T, b *Backend) uint64 {
	t.Helper()
	devs, err := b.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return devs[0].FreeMemory
}

func TestImportRejectsBadHandles(t *testing.T) {
	b := newBackend(t, fakeConfig(t, fakeOptions{}))
	gputest.CheckImportRejectsBadHandles(t, b, HandleKind, sdk.Handle{Kind: "posix-shm", Data: []byte("/dev/shm/x"), Size: 10}, 3)
}

func TestImportAcrossProcesses(t *testing.T) {
	cfg := fakeConfig(t, fakeOptions{})
	gputest.CheckImportAcrossProcesses(t, newBackend(t, cfg), helperEnv, EnvLibrary+"="+cfg.Library, EnvNVMLLibrary+"="+cfg.NVMLLibrary)
}
